// Package blocktest is the conformance suite that every block.Device in
// usher passes: ranges, zeros, trims, the read-only and out-of-range
// contracts, and optional interfaces (found with block.As) that agree
// with the base methods. Run is for writable devices, RunReader for
// devices that hold a given content and must not change (read-only
// devices, the RAM cache), RunReadOnly for the refusal of every write.
// It also makes test TLS certificates (WriteCerts).
//
// Only tests import blocktest; it imports block and the standard library.
package blocktest
