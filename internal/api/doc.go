// Package api is usher's REST JSON API over net/http: the admin API under
// /api/v1/admin/, the user API (login, resources, launches, sessions), the
// VDA API of the VDA protocol (enrol, register, heartbeat, session events;
// see vdaproto) and the OpenAPI document at /api/openapi.json.
//
// It adapts the site domain and the broker to HTTP: it decodes requests,
// converts the VDA protocol's messages to the broker's domain types, and
// turns application error codes into HTTP statuses. It reaches the broker
// through the small Broker interface it declares (a *broker.Broker in
// usher), the store through site.Store. It imports site, broker, auth,
// lhc (outage status), vdaproto, hotpath (its deferred answers), blob,
// icon and the Prometheus data model (the dashboard's figures); internal/server mounts it, cmd/usher uses its constants, and the
// tests of vda run it end to end.
package api
