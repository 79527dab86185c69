package nbd

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"time"
)

func newReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
func newWriter() *bufio.Writer         { return bufio.NewWriter(io.Discard) }

// fakeConn is enough of a net.Conn for negotiation to name its peer;
// a TLS handshake on it fails at once.
type fakeConn struct{ net.Conn }

func (fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (fakeConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (fakeConn) Write(b []byte) (int, error)      { return len(b), nil }
func (fakeConn) SetDeadline(time.Time) error      { return nil }
func (fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (fakeConn) SetWriteDeadline(time.Time) error { return nil }
func (fakeConn) Close() error                     { return nil }
