package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// decoyAgent counts whatever reaches it: a host a request might try to
// make the gateway dial.
type decoyAgent struct {
	srv  *httptest.Server
	hits atomic.Int32
}

func newDecoy(t *testing.T) *decoyAgent {
	d := &decoyAgent{}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.hits.Add(1)
		http.Error(w, "decoy", http.StatusTeapot)
	}))
	t.Cleanup(d.srv.Close)
	return d
}
