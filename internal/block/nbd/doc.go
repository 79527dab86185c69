// Package nbd serves block.Devices over the Network Block Device protocol
// and holds a small client for them.
//
// The server follows doc/proto.md of the NetworkBlockDevice project:
// fixed newstyle negotiation (OPT_GO, OPT_INFO, OPT_LIST, OPT_ABORT,
// OPT_EXPORT_NAME, OPT_STRUCTURED_REPLY, OPT_LIST/SET_META_CONTEXT with
// base:allocation, and OPT_STARTTLS when the server has a TLS
// configuration, optionally required; anything else gets
// NBD_REP_ERR_UNSUP), then READ, WRITE, FLUSH, TRIM, WRITE_ZEROES (FAST_ZERO,
// NO_HOLE), CACHE, BLOCK_STATUS and DISC with FUA. A connection runs
// many requests at once on a pool of workers; replies go out as each
// finishes, matched by cookie. Reads a device serves from memory
// (block.MemReader) and writes it takes without waiting
// (block.InlineWriter) run on the connection's reading goroutine
// instead, and their replies go out together once no further request
// is buffered. Payloads are bounded by MaxPayload.
//
// nbd imports block only. cmd/usher, block/imageexport, block/hostexport,
// blockbench and the block layers' tests import it.
package nbd
