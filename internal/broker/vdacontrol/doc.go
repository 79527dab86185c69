// Package vdacontrol is how a broker reaches VDAs over HTTP: Client
// implements broker.VDAControl by posting the VDA protocol's JSON messages
// (package vdaproto) to the control URL each VDA registered. It turns the
// broker's domain types into wire messages; a Prepare's ticket goes out
// only as its hash.
//
// It imports broker, vdaproto and tlsconf. Only the code that assembles a
// site (internal/server) and tests that run real VDAs import it.
package vdacontrol
