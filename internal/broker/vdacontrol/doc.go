// Package vdacontrol is how a broker reaches VDAs over HTTP: Client
// implements broker.VDAControl by posting the VDA protocol's JSON messages
// (package vdaproto) to the control URL each VDA registered. It turns the
// broker's domain types into wire messages; a Prepare's ticket goes out
// only as its hash.
//
// It imports broker and vdaproto. Only the code that assembles a site
// (cmd/usher) and tests that run real VDAs import it.
package vdacontrol
