package memnet_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/usher-vdi/usher/internal/memnet"
)

func TestHTTPOverPipes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := memnet.New()
		ln, err := n.Listen("app.test:80")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		tr := n.Transport()
		resp, err := (&http.Client{Transport: tr}).Get("http://app.test/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got, want := string(body), "hello"; got != want {
			t.Errorf("body %q, want %q", got, want)
		}
		tr.CloseIdleConnections()
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve = %v, want ErrServerClosed", err)
		}
	})
}

func TestDialRefused(t *testing.T) {
	n := memnet.New()
	if _, err := n.DialContext(context.Background(), "tcp", "nobody.test:80"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial with no listener = %v, want ECONNREFUSED", err)
	}
	ln, _ := n.Listen("app.test:80")
	if _, err := n.Listen("app.test:80"); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second listen = %v, want EADDRINUSE", err)
	}
	ln.Close()
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept after close = %v, want net.ErrClosed", err)
	}
	if _, err := n.DialContext(context.Background(), "tcp", "app.test:80"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after close = %v, want ECONNREFUSED", err)
	}
}
