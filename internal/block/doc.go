// Package block is the domain of usher's image streaming: the Device
// interface that every block layer implements (the NBD server serves one,
// write caches, the server RAM cache, the I/O meter and the remote stream
// client wrap one), its optional interfaces (MemReader, SliceReader,
// InlineWriter, Extenter) and the helpers that find them, the errors
// layers return, two simple devices (a file, memory) and two wrappers:
// ReadOnly and NopCloser.
//
// Layers compose like nbdkit filters: a layer takes a Device and is a
// Device. A layer that only changes some Device methods implements
// Wrapper, and As finds the optional interfaces of the devices under it,
// so no layer forwards them by hand.
//
// Any package may import block; block imports nothing of usher, only the
// standard library and golang.org/x/sys/unix.
package block
