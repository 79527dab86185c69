package nfuse

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

func TestDecodedCache(t *testing.T) {
	d := newDecoded()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	body := []byte(`<?xml version="1.0"?><NFuseProtocol version="5.4"><RequestAppData/></NFuseProtocol>`)
	req, err := Decode(body, Limits{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if d.get(body, now) != nil {
		t.Fatal("found a body never put")
	}
	d.put(body, req, now)
	if got := d.get(bytes.Clone(body), now.Add(time.Second)); got != req {
		t.Fatalf("the same bytes found %p, want %p", got, req)
	}
	other := bytes.Replace(body, []byte("5.4"), []byte("5.5"), 1)
	if d.get(other, now) != nil {
		t.Fatal("other bytes found the entry")
	}
	if d.get(body, now.Add(decodedTTL+time.Second)) != nil {
		t.Fatal("an expired entry was found")
	}
	big := append(bytes.Repeat([]byte(" "), decodedMaxBody), body...)
	d.put(big, req, now)
	if d.get(big, now) != nil {
		t.Fatal("a body over decodedMaxBody was kept")
	}
	for i := range decodedMax + 100 {
		d.put(fmt.Appendf(nil, "%s<!-- %d -->", body, i), req, now)
	}
	if n := len(d.m); n > decodedMax {
		t.Fatalf("%d entries, want at most %d", n, decodedMax)
	}
	d.put(body, req, now.Add(2*decodedTTL)) // sweeps the expired ones
	if n := len(d.m); n != 1 {
		t.Errorf("%d entries after the TTL, want 1", n)
	}
}
