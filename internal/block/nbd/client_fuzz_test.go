package nbd

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
)

func optReplyBytes(b []byte, opt, typ uint32, data []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, magicOptReply)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// FuzzClientHandshake feeds arbitrary server bytes to the client's
// handshake: it must end, with an error or a described export, without
// panicking.
func FuzzClientHandshake(f *testing.F) {
	hs := binary.BigEndian.AppendUint64(nil, magicNBD)
	hs = binary.BigEndian.AppendUint64(hs, magicOpt)
	hs = binary.BigEndian.AppendUint16(hs, flagFixedNewstyle|flagNoZeroes)
	info := binary.BigEndian.AppendUint16(nil, infoExport)
	info = binary.BigEndian.AppendUint64(info, 1<<20)
	info = binary.BigEndian.AppendUint16(info, tfHasFlags)
	meta := binary.BigEndian.AppendUint32(nil, 3)
	meta = append(meta, metaAllocation...)
	full := optReplyBytes(hs, optStructuredReply, repAck, nil)
	full = optReplyBytes(full, optSetMetaContext, repMetaContext, meta)
	full = optReplyBytes(full, optSetMetaContext, repAck, nil)
	full = optReplyBytes(full, optGo, repInfo, info)
	f.Add(optReplyBytes(full, optGo, repAck, nil))
	plain := optReplyBytes(hs, optStructuredReply, repErrUnsup, nil)
	plain = optReplyBytes(plain, optGo, repInfo, info)
	f.Add(optReplyBytes(plain, optGo, repAck, nil))
	f.Add(optReplyBytes(plain, optGo, repErrUnknown, []byte("no")))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &Client{bw: newWriter(), pending: make(map[uint64]*call)}
		if _, err := c.handshake(context.Background(), newReader(in), "disk", nil); err == nil && c.flags&tfHasFlags == 0 {
			t.Fatal("handshake succeeded without export info")
		}
	})
}

// FuzzClientReplies feeds arbitrary server bytes to the client's reply
// reader with a read, a block status and a flush in flight: it must
// fail or complete each call, stay within the read's buffer, and never
// panic.
func FuzzClientReplies(f *testing.F) {
	chunk := func(b []byte, flags, typ uint16, cookie uint64, data []byte) []byte {
		b = binary.BigEndian.AppendUint32(b, magicStructured)
		b = binary.BigEndian.AppendUint16(b, flags)
		b = binary.BigEndian.AppendUint16(b, typ)
		b = binary.BigEndian.AppendUint64(b, cookie)
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		return append(b, data...)
	}
	data := binary.BigEndian.AppendUint64(nil, 1<<20)
	data = append(data, make([]byte, 2048)...)
	hole := binary.BigEndian.AppendUint64(nil, 1<<20+2048)
	hole = binary.BigEndian.AppendUint32(hole, 2048)
	status := binary.BigEndian.AppendUint32(nil, 3)
	status = binary.BigEndian.AppendUint32(status, 4096)
	status = binary.BigEndian.AppendUint32(status, 3)
	seed := chunk(nil, 0, replyTypeOffsetData, 1, data)
	seed = chunk(seed, replyFlagDone, replyTypeOffsetHole, 1, hole)
	seed = chunk(seed, replyFlagDone, replyTypeBlockStatus, 2, status)
	seed = binary.BigEndian.AppendUint32(seed, magicSimple)
	seed = binary.BigEndian.AppendUint32(seed, 0)
	seed = binary.BigEndian.AppendUint64(seed, 3)
	f.Add(seed)
	errChunk := binary.BigEndian.AppendUint32(nil, errIO)
	errChunk = binary.BigEndian.AppendUint16(errChunk, 2)
	f.Add(chunk(nil, replyFlagDone, replyTypeError, 1, append(errChunk, "no"...)))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &Client{pending: make(map[uint64]*call), done: make(chan struct{}), hasMeta: true, metaID: 3}
		var ext []block.Extent
		calls := []*call{
			{buf: make([]byte, 4096), off: 1 << 20, done: make(chan struct{}, 1)},
			{ext: &ext, done: make(chan struct{}, 1)},
			{done: make(chan struct{}, 1)},
		}
		for i, cl := range calls {
			c.pending[uint64(i+1)] = cl
		}
		c.readReplies(newReader(in))
		for i, cl := range calls {
			select {
			case <-cl.done:
			default:
				t.Fatalf("call %d neither completed nor failed", i+1)
			}
			if cl.err == nil && cl.buf != nil && cl.got != int64(len(cl.buf)) {
				t.Fatalf("read completed with %d of %d bytes", cl.got, len(cl.buf))
			}
		}
	})
}
