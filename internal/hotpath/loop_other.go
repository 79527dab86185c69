//go:build !linux

package hotpath

import "net"

// loop is the event loop, which only Linux has.
type loop struct{ done chan struct{} }

func (*loop) shutdown() {}
func (*loop) close()    {}

// serveLoops declines: connections go on goroutines of their own.
func (s *Server) serveLoops(net.Listener) (bool, error) { return false, nil }
