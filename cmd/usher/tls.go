package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/usher-vdi/usher/internal/tlsconf"
)

// hangups calls reload at each SIGHUP (Main.Hangup in tests) until ctx
// is done or stop is called, logging what came of it. Only a command
// that has something to reload takes SIGHUP: for the others it keeps
// its default (the process ends).
func (m *Main) hangups(ctx context.Context, log *slog.Logger, reload func() error) (stop func()) {
	hup := m.Hangup
	unsubscribe := func() {}
	if hup == nil {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGHUP)
		ch := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(ch)
			for {
				select {
				case <-sig:
				case <-done:
					return
				}
				select {
				case ch <- struct{}{}:
				case <-done:
					return
				}
			}
		}()
		hup = ch
		unsubscribe = func() { signal.Stop(sig); close(done) }
	}
	ctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-hup:
				if !ok {
					return
				}
			}
			if err := reload(); err != nil {
				log.Error("SIGHUP: tls certificate not reloaded: keeping the one in use", "err", err)
			} else {
				log.Info("SIGHUP: tls certificate files read again")
			}
			if m.Reloaded != nil {
				m.Reloaded()
			}
		}
	}()
	return func() { cancel(); <-finished; unsubscribe() }
}

// metricsTLS is the TLS of a role's --metrics-listen: the rule
// (loopback, TLS or insecure), and the listener's certificate.
func metricsTLS(addr, cert, key string, insecure bool, log *slog.Logger, what string) (*tlsconf.Reloader, error) {
	if (cert == "") != (key == "") {
		return nil, usageError{fmt.Sprintf("%s needs both a certificate and a key", what)}
	}
	if err := tlsconf.CheckListen("--metrics-listen", addr, cert != "", insecure); err != nil {
		return nil, usageError{err.Error()}
	}
	if cert == "" {
		if !tlsconf.LoopbackAddr(addr) {
			log.Warn("INSECURE: --metrics-listen is off loopback and speaks clear HTTP (--insecure-listen)", "addr", addr)
		}
		return nil, nil
	}
	return tlsconf.NewReloader(cert, key, log.With("component", "tls"))
}
