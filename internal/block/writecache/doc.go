// Package writecache holds the per-target write caches that sit on top of
// a read-only image, in the modes of Citrix PVS: a sparse overlay file
// (on the server's disk or the device's disk), device RAM with a fixed
// budget, and device RAM with overflow to a local file written in large
// sequential segments. A target only ever sees its own writes. It imports
// block and meter; block/image (a version's delta is an overlay), the
// exports (block/imageexport, block/hostexport), cmd/usher and blockbench
// import it.
package writecache
