package nfuse

import (
	"bytes"
	"hash/maphash"
	"sync"
	"time"
)

// decoded remembers the requests decoded from bodies seen moments ago.
// Clients refresh their enumerations with the same bytes each time (the
// same credentials, the same query), so most bodies are decoded once and
// then found: a hash and a comparison instead of a parse. Decoding is a
// pure function of the body, so what is found is what Decode would give;
// everything after it (authentication, entitlements) runs as always.
//
// Bodies hold ctx1 credentials, which are obfuscated, not encrypted: an
// entry lives decodedTTL at most and the cache holds decodedMax entries
// of bodies up to decodedMaxBody bytes.
type decoded struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[uint64]*decodedEntry
	// swept is when expired entries were last dropped.
	swept time.Time
}

type decodedEntry struct {
	body []byte
	req  *Request
	at   time.Time
}

const (
	decodedMax     = 4096
	decodedMaxBody = 4 << 10
	decodedTTL     = time.Minute
)

func newDecoded() *decoded {
	return &decoded{seed: maphash.MakeSeed(), m: map[uint64]*decodedEntry{}}
}

// get returns the request decoded from body, nil when it is not known.
// The request must not be changed.
func (d *decoded) get(body []byte, now time.Time) *Request {
	if len(body) > decodedMaxBody {
		return nil
	}
	k := maphash.Bytes(d.seed, body)
	d.mu.Lock()
	e := d.m[k]
	d.mu.Unlock()
	if e == nil || now.Sub(e.at) > decodedTTL || !bytes.Equal(e.body, body) {
		return nil
	}
	return e.req
}

// put remembers req as what body decodes to.
func (d *decoded) put(body []byte, req *Request, now time.Time) {
	if len(body) > decodedMaxBody {
		return
	}
	e := &decodedEntry{body: bytes.Clone(body), req: req, at: now}
	k := maphash.Bytes(d.seed, body)
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Sub(d.swept) > decodedTTL {
		for k, e := range d.m {
			if now.Sub(e.at) > decodedTTL {
				delete(d.m, k)
			}
		}
		d.swept = now
	}
	if len(d.m) >= decodedMax {
		for k := range d.m { // any one: the map's order is random
			delete(d.m, k)
			break
		}
	}
	d.m[k] = e
}
