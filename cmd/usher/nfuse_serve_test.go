package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/ctx1"
)

// TestServeNFuse sends the IMA/FMA test's WCAT request, with a demo user's real
// ctx1 password, to usher serve's main listener (with the path in another
// case, as some clients spell it) and to its own --nfuse-listen listener.
func TestServeNFuse(t *testing.T) {
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", t.TempDir(), "--nfuse-listen", "127.0.0.1:0")
	nfuseAddr := ""
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		if strings.Contains(line, "NFuse listening") {
			_, nfuseAddr, _ = strings.Cut(line, "addr=")
		}
	}
	if nfuseAddr == "" {
		t.Fatalf("no NFuse listener in the log:\n%s", s.stderr.String())
	}
	body := `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.4"><RequestAppData><Scope traverse="subtree"></Scope><DesiredDetails>permissions</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType><ClientType>content</ClientType><Credentials><UserName>user0090</UserName><Password encoding="ctx1">` +
		ctx1.Encode("demo-pass-1") + `</Password><Domain type="NT">DEMO</Domain></Credentials><ClientName>LOADTESTER</ClientName><ClientAddress addresstype="dot">10.10.10.10</ClientAddress></RequestAppData></NFuseProtocol>`
	for _, url := range []string{s.url + "/Scripts/WPnBr.dll", "http://" + strings.TrimSpace(nfuseAddr) + "/scripts/wpnbr.dll"} {
		resp, err := http.Post(url, "text/xml", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		answer := string(raw)
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "text/xml") {
			t.Fatalf("%s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if n := strings.Count(answer, "<AppData>"); n < 400 || strings.Contains(answer, "ErrorId") {
			t.Fatalf("%s: %d AppData; the answer starts %.300s", url, n, answer)
		}
	}
	// A transaction is counted once its answer is written: the client
	// may read the answer first.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(metrics(t, s.url), `usher_nfuse_transactions_total{error_id="",request="RequestAppData"} 2`) {
		if time.Now().After(deadline) {
			t.Fatal("/metrics does not count the two NFuse enumerations")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
