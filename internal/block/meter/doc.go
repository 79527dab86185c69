// Package meter is the I/O meter layer: a block.Device that counts the
// operations and bytes passing through it into a Counters value, which
// several devices may share (every target's write cache RAM, say). The
// counters are plain Go values and also a Prometheus collector. It imports
// block and the Prometheus client; the layers and exports that count
// (writecache, block/imageexport, block/hostexport), cmd/usher and blockbench
// import it.
package meter
