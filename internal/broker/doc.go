// Package broker is the brokering domain service: the in-memory snapshot
// of the site configuration that enumeration is served from, entitlement
// resolution, load indexes, machine selection, admission control,
// lock-out, and the launch, session and VDA registration flows.
//
// Its API speaks domain types only (site types and its own, such as
// Registration, Heartbeat, SessionEvent and Prepare). It reaches the site
// DB, the VDAs and metrics only through the interfaces it is given:
// site.Store, VDAControl and Observer. It imports site and auth and no
// driver, transport, metrics library or wire protocol; a test keeps it so.
// Adapters at its edges do that work: api and nfuse turn HTTP requests
// into broker calls, vdacontrol reaches VDAs over HTTP, brokerprom reports
// to Prometheus.
//
// Transports, adapters and the code that assembles a site import it.
package broker
