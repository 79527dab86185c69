package nbd

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"

	"github.com/usher-vdi/usher/internal/block"
)

// errAbort ends negotiation without a log line: the client said goodbye.
var errAbort = errors.New("nbd: client aborted negotiation")

// conn is one client connection.
type conn struct {
	s   *Server
	nc  net.Conn
	log *slog.Logger
	br  *bufio.Reader
	bw  *bufio.Writer

	// Negotiated state.
	noZeroes   bool
	structured bool
	metaExport string // export the meta contexts were set for
	metaAlloc  bool   // base:allocation selected
	tls        bool   // upgraded with STARTTLS
	cert       *x509.Certificate
}

// negotiate runs the handshake until the client picks an export (which
// it returns, opened), aborts or breaks the protocol.
func (c *conn) negotiate(ctx context.Context) (block.Device, ExportInfo, error) {
	c.br = bufio.NewReaderSize(c.nc, 64<<10)
	c.bw = bufio.NewWriterSize(c.nc, 4<<10)
	return negotiateOn(ctx, c)
}

// negotiateOn is negotiate over c.br and c.bw, split out for the fuzzer.
func negotiateOn(ctx context.Context, c *conn) (block.Device, ExportInfo, error) {
	var hs [18]byte
	binary.BigEndian.PutUint64(hs[0:], magicNBD)
	binary.BigEndian.PutUint64(hs[8:], magicOpt)
	binary.BigEndian.PutUint16(hs[16:], flagFixedNewstyle|flagNoZeroes)
	c.bw.Write(hs[:])
	if err := c.bw.Flush(); err != nil {
		return nil, ExportInfo{}, err
	}
	var cf [4]byte
	if _, err := io.ReadFull(c.br, cf[:]); err != nil {
		return nil, ExportInfo{}, fmt.Errorf("read client flags: %w", err)
	}
	flags := binary.BigEndian.Uint32(cf[:])
	if flags&^clientFlagsKnown != 0 {
		return nil, ExportInfo{}, fmt.Errorf("unknown client flags %#x", flags)
	}
	c.noZeroes = flags&flagNoZeroes != 0

	var hdr [16]byte
	var data []byte
	for {
		if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
			return nil, ExportInfo{}, fmt.Errorf("read option: %w", err)
		}
		if m := binary.BigEndian.Uint64(hdr[:]); m != magicOpt {
			return nil, ExportInfo{}, fmt.Errorf("bad option magic %#x", m)
		}
		opt := binary.BigEndian.Uint32(hdr[8:])
		n := binary.BigEndian.Uint32(hdr[12:])
		if n > maxOptionLength {
			if opt == optExportName {
				return nil, ExportInfo{}, fmt.Errorf("export name of %d bytes", n)
			}
			if _, err := io.CopyN(io.Discard, c.br, int64(n)); err != nil {
				return nil, ExportInfo{}, err
			}
			if err := c.optReply(opt, repErrTooBig, []byte("option data too large")); err != nil {
				return nil, ExportInfo{}, err
			}
			continue
		}
		data = slices.Grow(data[:0], int(n))[:n]
		if _, err := io.ReadFull(c.br, data); err != nil {
			return nil, ExportInfo{}, fmt.Errorf("read option data: %w", err)
		}
		if c.s.RequireTLS && !c.tls && opt != optStartTLS && opt != optAbort {
			if opt == optExportName { // it cannot be refused with an error
				return nil, ExportInfo{}, errors.New("NBD_OPT_EXPORT_NAME before STARTTLS")
			}
			if err := c.optReply(opt, repErrTLSReqd, []byte("TLS is required: send NBD_OPT_STARTTLS first")); err != nil {
				return nil, ExportInfo{}, err
			}
			continue
		}
		dev, info, done, err := c.option(ctx, opt, data)
		if err != nil || done {
			return dev, info, err
		}
	}
}

// option handles one option. done is true when negotiation is over.
func (c *conn) option(ctx context.Context, opt uint32, data []byte) (dev block.Device, info ExportInfo, done bool, err error) {
	exports := c.s.Exports
	ctx = withPeer(ctx, c.peer())
	switch opt {
	case optExportName:
		name := string(data)
		dev, info, err := exports.Open(ctx, name, c.nc.RemoteAddr().String())
		if err != nil {
			return nil, info, true, fmt.Errorf("export %q: %w", name, err)
		}
		var b [10 + 124]byte
		binary.BigEndian.PutUint64(b[:], uint64(info.Size))
		binary.BigEndian.PutUint16(b[8:], c.transmissionFlags(info))
		out := b[:]
		if c.noZeroes {
			out = b[:10]
		}
		c.bw.Write(out)
		if err := c.bw.Flush(); err != nil {
			dev.Close()
			return nil, info, true, err
		}
		return dev, info, true, nil

	case optAbort:
		c.optReply(opt, repAck, nil)
		return nil, info, true, errAbort

	case optList:
		if len(data) != 0 {
			return nil, info, false, c.optReply(opt, repErrInvalid, []byte("NBD_OPT_LIST takes no data"))
		}
		list, err := exports.List(ctx)
		if errors.Is(err, ErrUnauthenticated) {
			return nil, info, false, c.optReply(opt, repErrPolicy, []byte("authentication required: present a TLS client certificate"))
		}
		if err != nil {
			c.log.Warn("nbd list exports", keyErr, err)
			return nil, info, false, c.optReply(opt, repErrPlatform, []byte("cannot list exports"))
		}
		for _, e := range list {
			b := binary.BigEndian.AppendUint32(nil, uint32(len(e.Name)))
			b = append(b, e.Name...)
			if err := c.optReplyNoFlush(opt, repServer, b); err != nil {
				return nil, info, false, err
			}
		}
		return nil, info, false, c.optReply(opt, repAck, nil)

	case optInfo, optGo:
		q, err := parseInfoRequest(data)
		if err != nil {
			return nil, info, false, c.optReply(opt, repErrInvalid, []byte(err.Error()))
		}
		if opt == optGo {
			dev, info, err = exports.Open(ctx, q.name, c.nc.RemoteAddr().String())
		} else {
			info, err = exports.Info(ctx, q.name)
		}
		if err != nil {
			return nil, info, false, c.exportError(opt, q.name, err)
		}
		if err := c.sendInfo(opt, info, q.infos); err != nil {
			if dev != nil {
				dev.Close()
			}
			return nil, info, true, err
		}
		if opt == optGo {
			if c.metaExport != q.name {
				c.metaAlloc = false
			}
			return dev, info, true, nil
		}
		return nil, info, false, nil

	case optStructuredReply:
		if len(data) != 0 {
			return nil, info, false, c.optReply(opt, repErrInvalid, []byte("NBD_OPT_STRUCTURED_REPLY takes no data"))
		}
		c.structured = true
		return nil, info, false, c.optReply(opt, repAck, nil)

	case optListMetaContext, optSetMetaContext:
		if !c.structured {
			return nil, info, false, c.optReply(opt, repErrInvalid, []byte("negotiate structured replies first"))
		}
		q, err := parseMetaRequest(data)
		if err != nil {
			return nil, info, false, c.optReply(opt, repErrInvalid, []byte(err.Error()))
		}
		if _, err := exports.Info(ctx, q.name); err != nil {
			return nil, info, false, c.exportError(opt, q.name, err)
		}
		match := false
		if opt == optListMetaContext && len(q.queries) == 0 {
			match = true
		}
		for _, s := range q.queries {
			if s == metaAllocation || (opt == optListMetaContext && s == "base:") {
				match = true
			}
		}
		if opt == optSetMetaContext {
			c.metaExport, c.metaAlloc = q.name, match
		}
		if match {
			b := binary.BigEndian.AppendUint32(nil, metaAllocationID)
			b = append(b, metaAllocation...)
			if err := c.optReplyNoFlush(opt, repMetaContext, b); err != nil {
				return nil, info, false, err
			}
		}
		return nil, info, false, c.optReply(opt, repAck, nil)

	case optStartTLS:
		switch {
		case c.s.TLS == nil:
			return nil, info, false, c.optReply(opt, repErrUnsup, []byte("this server has no TLS"))
		case c.tls:
			return nil, info, false, c.optReply(opt, repErrInvalid, []byte("TLS is already running"))
		case len(data) != 0:
			return nil, info, false, c.optReply(opt, repErrInvalid, []byte("NBD_OPT_STARTTLS takes no data"))
		case c.br.Buffered() != 0:
			// Bytes sent before our ACK cannot belong to the TLS
			// handshake the ACK starts.
			return nil, info, true, errors.New("client sent data after NBD_OPT_STARTTLS before the reply")
		}
		if err := c.optReply(opt, repAck, nil); err != nil {
			return nil, info, true, err
		}
		return nil, info, false, c.startTLS(ctx)

	default:
		return nil, info, false, c.optReply(opt, repErrUnsup, []byte("option not supported"))
	}
}

// startTLS runs the server side of the TLS handshake after an ACK to
// NBD_OPT_STARTTLS; everything after goes over TLS. A failed handshake
// ends the connection: the ACK cannot be taken back.
func (c *conn) startTLS(ctx context.Context) error {
	tc := tls.Server(c.nc, c.s.TLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("tls handshake: %w", err)
	}
	c.nc, c.tls = tc, true
	if st := tc.ConnectionState(); len(st.VerifiedChains) > 0 && len(st.PeerCertificates) > 0 {
		c.cert = st.PeerCertificates[0]
	}
	c.br = bufio.NewReaderSize(tc, 64<<10)
	c.bw = bufio.NewWriterSize(tc, 4<<10)
	return nil
}

// peer is the client as the Exporter sees it.
func (c *conn) peer() Peer {
	return Peer{Remote: c.nc.RemoteAddr().String(), TLS: c.tls, Certificate: c.cert}
}

func (c *conn) exportError(opt uint32, name string, err error) error {
	switch {
	case errors.Is(err, ErrUnknownExport):
		return c.optReply(opt, repErrUnknown, fmt.Appendf(nil, "no export named %q", name))
	case errors.Is(err, ErrUnauthenticated):
		return c.optReply(opt, repErrPolicy, fmt.Appendf(nil, "export %q needs authentication: present a TLS client certificate", name))
	case errors.Is(err, ErrExportBusy):
		return c.optReply(opt, repErrPolicy, fmt.Appendf(nil, "export %q is busy", name))
	case errors.Is(err, context.Canceled):
		return c.optReply(opt, repErrShutdown, []byte("server shutting down"))
	}
	c.log.Warn("nbd open export", keyExport, name, keyErr, err)
	return c.optReply(opt, repErrPlatform, fmt.Appendf(nil, "export %q cannot be opened", name))
}

func (c *conn) transmissionFlags(info ExportInfo) uint16 {
	f := uint16(tfHasFlags | tfSendFlush | tfSendFUA | tfSendTrim | tfSendZeroes | tfSendFastZero | tfSendCache)
	if info.ReadOnly {
		f |= tfReadOnly
	}
	if info.MultiConn {
		f |= tfCanMultiConn
	}
	if c.structured {
		f |= tfSendDF
	}
	return f
}

func (c *conn) sendInfo(opt uint32, info ExportInfo, want []uint16) error {
	b := make([]byte, 0, 64)
	b = binary.BigEndian.AppendUint16(b, infoExport)
	b = binary.BigEndian.AppendUint64(b, uint64(info.Size))
	b = binary.BigEndian.AppendUint16(b, c.transmissionFlags(info))
	if err := c.optReplyNoFlush(opt, repInfo, b); err != nil {
		return err
	}
	// Block sizes go out whether asked or not: clients that do not
	// understand them ignore them.
	b = binary.BigEndian.AppendUint16(b[:0], infoBlockSize)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint32(b, PreferredBlockSize)
	b = binary.BigEndian.AppendUint32(b, MaxPayload)
	if err := c.optReplyNoFlush(opt, repInfo, b); err != nil {
		return err
	}
	for _, w := range want {
		switch {
		case w == infoName:
			b = binary.BigEndian.AppendUint16(b[:0], infoName)
			b = append(b, info.Name...)
		case w == infoDescription && info.Description != "":
			b = binary.BigEndian.AppendUint16(b[:0], infoDescription)
			b = append(b, info.Description...)
		default:
			continue
		}
		if err := c.optReplyNoFlush(opt, repInfo, b); err != nil {
			return err
		}
	}
	return c.optReply(opt, repAck, nil)
}

func (c *conn) optReplyNoFlush(opt, typ uint32, data []byte) error {
	var h [20]byte
	binary.BigEndian.PutUint64(h[:], magicOptReply)
	binary.BigEndian.PutUint32(h[8:], opt)
	binary.BigEndian.PutUint32(h[12:], typ)
	binary.BigEndian.PutUint32(h[16:], uint32(len(data)))
	c.bw.Write(h[:])
	_, err := c.bw.Write(data)
	return err
}

func (c *conn) optReply(opt, typ uint32, data []byte) error {
	if err := c.optReplyNoFlush(opt, typ, data); err != nil {
		return err
	}
	return c.bw.Flush()
}
