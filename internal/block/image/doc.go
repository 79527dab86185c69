// Package image is the image store: named disk images kept in a
// directory as a raw base plus a chain of versions, each a delta of
// changed blocks (a sparse overlay file and a block bitmap), with the
// PVS life cycle maintenance → test → production (one production version
// per image; the one before is superseded), import, full and partial
// merges, and inspection. It opens versions as block.Devices; serving
// them is block/imageexport's job. Only Create (for Import) makes a store;
// Open fails with ErrNoStore on a missing one.
//
// Each version out of maintenance has a table of the SHA-256 digests of
// its 64 KiB blocks (block/digest, Store.Digests), which the stream
// serves to host caches so that they key blocks by content.
//
// Layout: DIR/NAME/image.json describes the versions; vN.raw is a base,
// vN.delta and vN.delta.map a delta over version N's parent, vN.digests
// version N's table of digests (digest.Table's wire form).
//
// image imports block, block/digest and block/writecache (deltas are
// overlays), never nbd or the other layers; cmd/usher, block/imageexport,
// blockbench, internal/bench, the boot server (boot/boothttp) and
// internal/server import it.
package image
