// Package boot is the domain of network boot, as PVS boots its target
// devices: a target known to the site by its MAC address (site.Target)
// fetches an iPXE script that names the kernel and initramfs of the
// image version it is bound to, and the NBD export of that version as
// its root disk. This package resolves a target's binding against the
// image store's versions, renders the scripts (the fixed chain script,
// a target's boot script, the refusals) and parses what comes from the
// wire (MACs in queries and paths). It does no I/O.
//
// A target whose write cache is on the device (ram, ram-overflow: its
// RAM, and a local disk past it) boots through usher target in its own
// initramfs: its kernel command line attaches the root disk at
// DeviceListen, on the target's loopback, and names the stream's export
// as usher.upstream (KernelArgs); without an agent to run there, the
// boot is refused (CheckAgent).
//
// Adapters: boot/boothttp serves the scripts, kernels and initramfs
// over HTTP; boot/ext4boot finds and reads a version's kernel and
// initramfs in its ext4 filesystem; boot/initramfs makes the overlay
// that runs the device-side cache. internal/server assembles them.
//
// boot imports site (the target) and nothing that does I/O; any package
// may import it.
package boot
