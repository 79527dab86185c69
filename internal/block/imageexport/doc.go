// Package imageexport is the NBD export stack of `usher stream`: Images
// serves the versions of an image store (block/image) as NBD exports
// named IMAGE or IMAGE@VERSION (Name, ParseName), each built from the
// version's chain, the I/O meters (block/meter), the server RAM cache
// shared by every connection (block/ramcache) and, per connection, a
// server-disk write cache (block/writecache) or, for a maintenance
// version, its one private-mode writer; and each version's table of
// block digests (block/digest) as IMAGE@VERSION/digests, for host caches.
//
// imageexport imports block, its layers and block/nbd; internal/streamrole
// (which assembles usher stream), cmd/usher (usher image's names),
// blockbench and internal/bench (its layer names) import it.
package imageexport
