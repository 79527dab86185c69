// Package hostexport serves the VMs of a host their images through the
// host's cache (package hostcache): it is the nbd.Exporter of `usher
// hostcache`.
//
// Each VM is an export named as the VM, bound to an image export of the
// upstream stream (IMAGE, its production version, or IMAGE@N). A VM's
// connection is a new boot: the image is resolved again (so a VM boots
// the version promoted since its last boot), and its writes go to a new
// overlay of its own on local disk (Writes "local": a file of that boot
// alone, VM.N.overlay, created exclusively and removed when the boot
// ends, so that no later boot can open it by name) or to a connection of
// its own to upstream (Writes "upstream",
// where the stream keeps them in its server-side write cache; they are
// lost with that connection). One connection per VM at a time.
//
// Reads go through one Device per VM boot over the version's shared
// Upstream: keyed by the version's digests when the stream serves them
// (IMAGE@N/digests), so versions and images share the blocks they have
// in common, else by position under the version's identity. Warm reads
// use the export "warm/IMAGE" (read-only, any number of connections),
// which reads the image through the cache for `usher hostcache warm`.
//
// Metrics (Collector): per VM and image, blocks served from the cache,
// missed, known zero, upstream reads and bytes, digest mismatches; per
// image, whether upstream is connected, its losses and reconnects, and
// whether its blocks are keyed by content; for the cache, its use,
// evictions, corrupt blocks and write errors.
package hostexport
