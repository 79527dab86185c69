package nbd

import (
	"bufio"
	"bytes"
	"io"
	"net"
)

func newReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
func newWriter() *bufio.Writer         { return bufio.NewWriter(io.Discard) }

// fakeConn is enough of a net.Conn for negotiation to name its peer.
type fakeConn struct{ net.Conn }

func (fakeConn) RemoteAddr() net.Addr { return &net.TCPAddr{} }
