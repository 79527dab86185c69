// Package vdaproto is the wire protocol between brokers and VDAs (session
// hosts): HTTP with JSON bodies, in two directions.
//
// VDA to broker, under /api/v1/vda/ on the broker:
//
//	POST /api/v1/vda/enrol      EnrolRequest -> EnrolResponse (no credential; the site enrolment secret)
//	POST /api/v1/vda/machines   MachinesRequest -> MachinesResponse (no credential; the site enrolment secret)
//	POST /api/v1/vda/register   RegisterRequest -> RegisterResponse
//	POST /api/v1/vda/heartbeat  Heartbeat -> HeartbeatResponse
//	POST /api/v1/vda/events     SessionEvent -> 204
//
// Every call but enrol and machines carries the machine credential from enrol as
// "Authorization: Bearer CREDENTIAL". A heartbeat or an event from a
// machine the broker does not know as registered gets 409 with code
// "not_registered": the VDA registers again.
//
// Broker to VDA, under the ControlURL the VDA registered, with the
// ControlToken it registered as "Authorization: Bearer TOKEN":
//
//	POST {control}/prepare      PrepareRequest -> 204 (a session is about to arrive)
//	POST {control}/logoff       SessionRequest -> 204
//	POST {control}/disconnect   SessionRequest -> 204
//
// Client to VDA: a display-protocol client (or the simulator standing in
// for one) presents its ticket, which is single-use and expires:
//
//	POST {control}/connect      ConnectRequest -> ConnectResponse
//
// or, on a machine that runs the sessions' displays (ProtocolVNC),
//
//	GET {control}/display       WebSocket, the ticket in a subprotocol (display.go)
//
// It needs no other credential: the ticket is one. Until a ticket is
// presented the session stays pending; a session whose ticket expired
// unpresented is forgotten 30 seconds later, on both sides. On a real
// host the display side presents it, having received it from the client
// (an RDP file carries it in loadbalanceinfo as "usher-ticket:TICKET", an
// ICA file as LogonTicket); the README's VDAs section shows the request.
//
// Both directions speak TLS off loopback. The VDA verifies brokers
// against the site's CA (or the system roots); the broker dials an https
// ControlURL pinned to the certificate fingerprint the VDA registered
// (RegisterRequest.ControlPin), so that the control token goes only to
// the listener that holds that certificate's key, and sends no token to
// an http:// ControlURL off loopback unless the site allows it.
//
// Errors in both directions are the API's JSON error document,
// {"error": {"code": "...", "message": "..."}}.
//
// The package holds only the messages, paths, codes and TicketHash; it
// imports no other usher package. Its users are the adapters on either
// side of the wire: api (the broker's VDA endpoints), vdacontrol (the
// broker's client for VDAs) and vda (the agent), and cmd/usher (usher vda
// asks a broker for the site's machine names). The broker does not
// import it: those adapters convert its messages to the broker's types.
package vdaproto
