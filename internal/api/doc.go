// Package api is usher's REST JSON API over net/http: the admin API under
// /api/v1/admin/, the user API (login, resources, launches, sessions), the
// VDA API of the VDA protocol (enrol, register, heartbeat, session events;
// see vdaproto) and the OpenAPI document at /api/openapi.json.
//
// It adapts the site domain and the broker to HTTP: it decodes requests,
// converts the VDA protocol's messages to the broker's domain types, and
// turns application error codes into HTTP statuses. It imports site,
// broker, auth and vdaproto; nothing but the code that assembles a site
// (cmd/usher) and end-to-end tests imports it.
package api
