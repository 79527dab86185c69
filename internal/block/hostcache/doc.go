// Package hostcache is a host's persistent read cache of image blocks on
// local disk (XenServer's IntelliCache, seed 003): every export of every
// image on a host reads through one Cache, which keeps each block it
// fetched from upstream so that the central storage serves it once per
// host, and keeps it across restarts.
//
// A Cache is a directory holding three files:
//
//   - blocks: Slots × BlockSize bytes, one block per slot;
//   - index: an append-only log of commit records, each naming a slot,
//     the block's key, its length and a CRC-32C of its bytes, after a
//     header that fixes the block size;
//   - lock: held with flock while a Cache is open, so that a second
//     process on the same directory refuses to start.
//
// A block is written to its slot first and committed by its record
// after; at open the index is replayed (a torn last record is dropped),
// so the cache comes back without reading upstream. Every read of a slot
// is checked against its record's CRC: a block torn by a crash, or
// corrupted on disk, is never served; it counts as corrupt and is fetched
// again. No fsync is needed for that guarantee, and none is made on the
// read path. A block is checked whole once per Open (or not at all when
// this process wrote it); after that a read of a part of it reads only
// that part of the disk (ReadPart), so that 4 KiB reads of 64 KiB
// blocks cost 4 KiB.
//
// Blocks are found by Key: a content digest where the upstream offers
// one (identical blocks of different images or versions are then stored
// once), or PositionKey(image, index) otherwise, where image must name
// the content (a new version, a new name). Concurrent misses of one key
// cost one fetch (single flight).
//
// WrapDigests makes a read-only Device of an upstream through the Cache,
// keyed by the digests of the upstream's version (package digest, served
// by the stream): a new version fetches only the blocks that changed,
// blocks that several images hold are fetched and kept once, zero blocks
// are made without a fetch, and each fetched block is checked against
// its digest (fetched again once on a mismatch, never kept unless it
// matches). Wrap does the same keyed by position, for an upstream
// without digests. A VM's write overlay composes above either (package
// writecache).
//
// Eviction within the size: empty slots are taken first, then CLOCK
// (second chance): a slot read since the hand last passed is spared
// once; slots being read or filled are never taken.
//
// Upstream is the connection under a Device: reads are bounded by a
// timeout rather than by their caller (one VM going away must not drop
// the connection every VM shares), and a lost connection is dialled
// again with backoff while cached blocks go on being served and misses
// fail at once with ErrUpstreamDown.
package hostcache
