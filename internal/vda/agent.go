package vda

import (
	"context"
	"net"
	"sync"
)

// RunAgent serves m's control endpoint on ln and runs m until ctx is done
// or m gives up; it returns m's error, or the control server's if that
// failed first. The listener is closed on return, and the sessions'
// displays are stopped.
func RunAgent(ctx context.Context, m *Machine, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		serveErr error
	)
	wg.Go(func() {
		serveErr = ServeControl(ctx, ln, m.Handler(), m.log)
		cancel()
	})
	err := m.Run(ctx)
	cancel()
	wg.Wait()
	m.stopDisplays(context.WithoutCancel(ctx))
	if serveErr != nil {
		return serveErr
	}
	return err
}
