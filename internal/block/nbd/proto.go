package nbd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Wire constants of the NBD protocol (NetworkBlockDevice doc/proto.md).
const (
	magicNBD        = 0x4e42444d41474943 // "NBDMAGIC"
	magicOpt        = 0x49484156454f5054 // "IHAVEOPT"
	magicOptReply   = 0x0003e889045565a9
	magicRequest    = 0x25609513
	magicSimple     = 0x67446698
	magicStructured = 0x668e33ef

	flagFixedNewstyle = 1 << 0 // handshake flags
	flagNoZeroes      = 1 << 1
	clientFlagsKnown  = flagFixedNewstyle | flagNoZeroes

	optExportName      = 1
	optAbort           = 2
	optList            = 3
	optStartTLS        = 5
	optInfo            = 6
	optGo              = 7
	optStructuredReply = 8
	optListMetaContext = 9
	optSetMetaContext  = 10

	repAck         = 1
	repServer      = 2
	repInfo        = 3
	repMetaContext = 4
	repErrUnsup    = 1<<31 + 1
	repErrPolicy   = 1<<31 + 2
	repErrInvalid  = 1<<31 + 3
	repErrPlatform = 1<<31 + 4
	repErrTLSReqd  = 1<<31 + 5
	repErrUnknown  = 1<<31 + 6
	repErrShutdown = 1<<31 + 7
	repErrTooBig   = 1<<31 + 9

	infoExport      = 0
	infoName        = 1
	infoDescription = 2
	infoBlockSize   = 3

	tfHasFlags      = 1 << 0 // transmission flags
	tfReadOnly      = 1 << 1
	tfSendFlush     = 1 << 2
	tfSendFUA       = 1 << 3
	tfSendTrim      = 1 << 5
	tfSendZeroes    = 1 << 6
	tfSendDF        = 1 << 7
	tfCanMultiConn  = 1 << 8
	tfSendCache     = 1 << 10
	tfSendFastZero  = 1 << 11
	cmdFlagFUA      = 1 << 0
	cmdFlagNoHole   = 1 << 1
	cmdFlagDF       = 1 << 2
	cmdFlagReqOne   = 1 << 3
	cmdFlagFastZero = 1 << 4

	cmdRead        = 0
	cmdWrite       = 1
	cmdDisc        = 2
	cmdFlush       = 3
	cmdTrim        = 4
	cmdCache       = 5
	cmdWriteZeroes = 6
	cmdBlockStatus = 7

	replyFlagDone        = 1 << 0
	replyTypeNone        = 0
	replyTypeOffsetData  = 1
	replyTypeOffsetHole  = 2
	replyTypeBlockStatus = 5
	replyTypeError       = 1<<15 + 1

	errPerm     = 1
	errIO       = 5
	errNoMem    = 12
	errInval    = 22
	errNoSpc    = 28
	errOverflow = 75
	errNotSup   = 95
	errShutdown = 108

	// metaAllocationID is the context ID of base:allocation.
	metaAllocationID = 1
	metaAllocation   = "base:allocation"
)

// Limits the server enforces.
const (
	// MaxPayload is the largest READ or WRITE the server accepts (the
	// maximum block size it advertises): 32 MiB.
	MaxPayload = 32 << 20
	// PreferredBlockSize is the block size advertised as preferred.
	PreferredBlockSize = 4096
	// maxOptionLength bounds the data of one negotiation option.
	maxOptionLength = 64 << 10
	// maxString is the spec's bound on names and queries.
	maxString = 4096
	// DefaultPort is the IANA port for NBD.
	DefaultPort = 10809
)

// requestSize is the size of a (compact) request header.
const requestSize = 28

// request is a parsed request header.
type request struct {
	flags  uint16
	typ    uint16
	cookie uint64
	offset uint64
	length uint32
}

var errBadMagic = errors.New("nbd: bad request magic")

// parseRequest decodes a 28-byte request header.
func parseRequest(b []byte) (request, error) {
	if len(b) < requestSize {
		return request{}, fmt.Errorf("nbd: short request header (%d bytes)", len(b))
	}
	if m := binary.BigEndian.Uint32(b); m != magicRequest {
		return request{}, fmt.Errorf("%w %#x", errBadMagic, m)
	}
	return request{
		flags:  binary.BigEndian.Uint16(b[4:]),
		typ:    binary.BigEndian.Uint16(b[6:]),
		cookie: binary.BigEndian.Uint64(b[8:]),
		offset: binary.BigEndian.Uint64(b[16:]),
		length: binary.BigEndian.Uint32(b[24:]),
	}, nil
}

func putRequest(b []byte, r request) {
	binary.BigEndian.PutUint32(b, magicRequest)
	binary.BigEndian.PutUint16(b[4:], r.flags)
	binary.BigEndian.PutUint16(b[6:], r.typ)
	binary.BigEndian.PutUint64(b[8:], r.cookie)
	binary.BigEndian.PutUint64(b[16:], r.offset)
	binary.BigEndian.PutUint32(b[24:], r.length)
}

// allowedFlags are the command flags each command may carry.
func allowedFlags(typ uint16, structured bool) (uint16, bool) {
	switch typ {
	case cmdRead:
		if structured {
			return cmdFlagFUA | cmdFlagDF, true
		}
		return cmdFlagFUA, true
	case cmdWrite:
		return cmdFlagFUA, true
	case cmdFlush, cmdDisc, cmdCache:
		return 0, true
	case cmdTrim:
		return cmdFlagFUA, true
	case cmdWriteZeroes:
		return cmdFlagFUA | cmdFlagNoHole | cmdFlagFastZero, true
	case cmdBlockStatus:
		return cmdFlagReqOne, true
	}
	return 0, false
}

// reader is a cursor over option data that records the first short read.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) u16() uint16 {
	if len(r.b) < 2 {
		r.bad, r.b = true, nil
		return 0
	}
	v := binary.BigEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *reader) u32() uint32 {
	if len(r.b) < 4 {
		r.bad, r.b = true, nil
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) str(n uint32) string {
	if n > maxString || uint64(n) > uint64(len(r.b)) {
		r.bad, r.b = true, nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// infoRequest is the data of NBD_OPT_INFO and NBD_OPT_GO.
type infoRequest struct {
	name  string
	infos []uint16
}

func parseInfoRequest(b []byte) (infoRequest, error) {
	r := reader{b: b}
	var q infoRequest
	q.name = r.str(r.u32())
	n := r.u16()
	for range n {
		q.infos = append(q.infos, r.u16())
	}
	if r.bad || len(r.b) != 0 {
		return infoRequest{}, errors.New("malformed info request")
	}
	return q, nil
}

// metaRequest is the data of NBD_OPT_LIST/SET_META_CONTEXT.
type metaRequest struct {
	name    string
	queries []string
}

func parseMetaRequest(b []byte) (metaRequest, error) {
	r := reader{b: b}
	var q metaRequest
	q.name = r.str(r.u32())
	n := r.u32()
	if uint64(n)*4 > uint64(len(r.b)) {
		return metaRequest{}, errors.New("malformed meta context request")
	}
	for range n {
		q.queries = append(q.queries, r.str(r.u32()))
	}
	if r.bad || len(r.b) != 0 {
		return metaRequest{}, errors.New("malformed meta context request")
	}
	return q, nil
}

var timeZero time.Time
