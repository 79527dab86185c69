package memnet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
)

// Network is a set of listeners, addressed by "host:port". The zero value
// is not usable; use New. Create it inside the bubble that uses it.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*Listener
}

// New returns an empty network.
func New() *Network {
	return &Network{listeners: map[string]*Listener{}}
}

// Listen returns a listener at addr ("host:port"), which must be free.
func (n *Network) Listen(addr string) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.listeners[addr]; ok {
		return nil, fmt.Errorf("memnet: listen on %s: %w", addr, syscall.EADDRINUSE)
	}
	l := &Listener{net: n, addr: pipeAddr(addr), conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// DialContext connects to the listener at addr, as net.Dialer.DialContext
// does; network is ignored. It fails with ECONNREFUSED when nothing listens
// there.
func (n *Network) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: "memnet", Addr: pipeAddr(addr), Err: syscall.ECONNREFUSED}
	if l == nil {
		return nil, refused
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
		refused.Err = ctx.Err()
	}
	client.Close()
	server.Close()
	return nil, refused
}

// Transport returns an HTTP transport that dials the network. Close its
// idle connections before the bubble ends.
func (n *Network) Transport() *http.Transport {
	return &http.Transport{DialContext: n.DialContext, ForceAttemptHTTP2: false}
}

// Listener is a net.Listener on a Network.
type Listener struct {
	net   *Network
	addr  pipeAddr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

var _ net.Listener = (*Listener)(nil)

// Accept waits for the next dial; it returns net.ErrClosed once the
// listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "memnet", Addr: l.addr, Err: net.ErrClosed}
	}
}

// Close stops the listener and frees its address; connections already
// accepted stay open.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.net.mu.Lock()
		delete(l.net.listeners, string(l.addr))
		l.net.mu.Unlock()
	})
	return nil
}

// Addr returns the "host:port" the listener was created with.
func (l *Listener) Addr() net.Addr { return l.addr }

type pipeAddr string

func (a pipeAddr) Network() string { return "memnet" }
func (a pipeAddr) String() string  { return string(a) }
