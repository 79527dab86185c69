// Package ramcache is the server RAM cache: an LRU of image blocks shared
// by every target, so that the second target to boot an image reads it
// from memory. It caches read-only devices only, and the views it makes
// refuse writes; the cache is sharded so that reads of different blocks
// do not contend on one lock.
//
// ramcache imports block only; block/imageexport, cmd/usher, blockbench and
// tests import it.
package ramcache
