package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// History records what brokers acknowledged, as a Jepsen-style checker
// reads it: every launch and logoff a client was told succeeded, and the
// calls whose outcome the client did not learn. Check then compares it
// with the site DB. Its clients (Start) play users who log on over REST,
// launch one desktop whose policy reconnects a user to their session, and
// now and then log off.
type History struct {
	password, resource string
	// Timeline, when set before Start, gets every call's outcome.
	Timeline *Timeline
	// StaleOK tolerates acknowledged sessions doubled by a launch that
	// missed the user's session: where a leader died with its records.
	StaleOK bool

	mu        sync.Mutex
	launched  map[string]time.Time // session ID → last acknowledged launch
	loggedOff map[string]time.Time
	unknown   map[string]bool // sessions whose last logoff's outcome the client did not learn
	// indeterminate counts launches whose outcome the client did not
	// learn: each may have made a session no client knows.
	indeterminate int
	errors        map[string]int // "op error kind" → count
	since         time.Time      // Mark's time
	firstOK       time.Time      // the first launch acknowledged after since
}

// NewHistory returns an empty history of clients that log on with
// password and launch resource, a desktop whose policy reconnects.
func NewHistory(password, resource string) *History {
	return &History{password: password, resource: resource, launched: map[string]time.Time{}, loggedOff: map[string]time.Time{},
		unknown: map[string]bool{}, errors: map[string]int{}}
}

// Mark starts watching for the first launch acknowledged after at.
func (h *History) Mark(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since, h.firstOK = at, time.Time{}
}

// FirstOK returns when the first launch after Mark's time was
// acknowledged: zero until one is.
func (h *History) FirstOK() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.firstOK
}

// Launched returns the IDs of the sessions a launch was acknowledged for.
func (h *History) Launched() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Collect(maps.Keys(h.launched))
}

// AcknowledgedSince counts the sessions whose last launch was
// acknowledged after at.
func (h *History) AcknowledgedSince(at time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, t := range h.launched {
		if t.After(at) {
			n++
		}
	}
	return n
}

// Errors returns the failed calls so far by operation and kind
// ("launch 503 unavailable").
func (h *History) Errors() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.errors)
}

// Start starts clients that play users first to last, shared among them so
// that one user's calls never overlap, against the broker base returns
// (asked at every call, so that a test may move them). stop ends them
// and waits.
func (h *History) Start(base func() string, clients, first, last int, name func(int) string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range clients {
		var users []string
		for u := first + i; u <= last; u += clients {
			users = append(users, name(u))
		}
		if len(users) == 0 {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); h.client(ctx, base, users) }()
	}
	return func() { cancel(); wg.Wait() }
}

// client plays users in turn until ctx ends.
func (h *History) client(ctx context.Context, base func() string, users []string) {
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	do := func(op, method, path, token string, body any, out any) (int, string) {
		var r io.Reader
		if body != nil {
			raw, _ := json.Marshal(body)
			r = strings.NewReader(string(raw))
		}
		start := time.Now()
		code, kind := call(ctx, hc, method, base()+"/api/v1"+path, token, r, out)
		if kind != "stopped" && h.Timeline != nil {
			h.Timeline.Record(op, start, time.Since(start), kind)
		}
		return code, kind
	}
	tokens := map[string]string{}
	for i := 0; ctx.Err() == nil; i++ {
		user := users[i%len(users)]
		if tokens[user] == "" {
			var out struct{ Token string }
			if _, kind := do("logon", "POST", "/login", "", map[string]string{"username": user, "password": h.password}, &out); kind != "" {
				h.fail("logon " + kind)
				pause(ctx)
				continue
			}
			tokens[user] = out.Token
		}
		var l struct {
			SessionID string `json:"session_id"`
		}
		_, kind := do("launch", "POST", "/resources/"+url.PathEscape(h.resource)+"/launch", tokens[user], nil, &l)
		if kind != "" {
			h.fail("launch " + kind)
			if kind == "stopped" || strings.HasPrefix(kind, "transport") || strings.Contains(kind, site.EUnavailable) {
				// The session may have been made without the client
				// being told: an indeterminate launch, as Jepsen says.
				h.mu.Lock()
				h.indeterminate++
				h.mu.Unlock()
			}
			pause(ctx)
			continue
		}
		now := time.Now()
		h.mu.Lock()
		h.launched[l.SessionID] = now
		if !h.since.IsZero() && h.firstOK.IsZero() && now.After(h.since) {
			h.firstOK = now
		}
		h.mu.Unlock()
		if i%3 != 0 {
			continue
		}
		if code, kind := do("logoff", "POST", "/sessions/"+l.SessionID+"/logoff", tokens[user], nil, nil); kind != "" {
			h.fail("logoff " + kind)
			// A logoff that failed with a 5xx, or whose answer never
			// came, may have happened in part (the VDA was told first).
			if code == 0 || code >= 500 {
				h.mu.Lock()
				h.unknown[l.SessionID] = true
				h.mu.Unlock()
			}
			continue
		}
		h.mu.Lock()
		h.loggedOff[l.SessionID] = time.Now()
		h.mu.Unlock()
	}
}

// pause waits 20 ms after a failure, or until ctx ends.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(20 * time.Millisecond):
	}
}

// call makes one REST call and returns its status and, when it failed,
// its kind: "stopped" (ctx ended), "transport: ...", or "STATUS code".
func call(ctx context.Context, hc *http.Client, method, u, token string, body io.Reader, out any) (int, string) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, "request: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, "stopped"
		}
		return 0, "transport: " + transportKind(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		if ctx.Err() != nil {
			return 0, "stopped"
		}
		return 0, "transport: " + transportKind(err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(b, &e)
		return resp.StatusCode, fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Code)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, "answer: not JSON"
		}
	}
	return resp.StatusCode, ""
}

// transportKind shortens a transport error to its kind, without the
// URL and ports that would make every error a kind of its own.
func transportKind(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "Client.Timeout") || strings.Contains(s, "deadline exceeded"):
		return "timeout"
	case strings.Contains(s, "connection refused"):
		return "connection refused"
	case strings.Contains(s, "connection reset"):
		return "connection reset"
	case strings.Contains(s, "EOF"):
		return "EOF"
	}
	return s
}

func (h *History) fail(kind string) {
	h.mu.Lock()
	h.errors[kind]++
	h.mu.Unlock()
}

// Verdict is what Check found. Problems lists what breaks the history's
// promises; a verdict without any is a pass.
type Verdict struct {
	// Launched counts the sessions a launch was acknowledged for,
	// LoggedOff the acknowledged logoffs, Sessions the site DB's.
	Launched, LoggedOff, Sessions int
	// Indeterminate counts the launches whose outcome no client learned.
	Indeterminate int
	Errors        map[string]int
	// Lost: acknowledged sessions the site DB does not hold, or holds
	// as logged off when no logoff was acknowledged after their last
	// launch. Stale: acknowledged logoffs the site DB does not show.
	// Unexpected: live sessions no client was told of, beyond the
	// indeterminate launches. Duplicated: users with two live,
	// acknowledged sessions of the desktop, whose policy reconnects.
	// OverLimit: machines holding more live sessions than they may.
	Lost, Stale, Unexpected, Duplicated, OverLimit []string
	// Notes says what was tolerated and why.
	Notes []string
}

// Problems lists the verdict's failures, one line per kind, at most ten
// cases each.
func (v Verdict) Problems() []string {
	var out []string
	for _, k := range []struct {
		name string
		list []string
	}{{"lost", v.Lost}, {"stale", v.Stale}, {"unexpected", v.Unexpected}, {"duplicated", v.Duplicated}, {"over their machine's limit", v.OverLimit}} {
		if len(k.list) > 0 {
			l := slices.Sorted(slices.Values(k.list))
			out = append(out, fmt.Sprintf("%d sessions %s: %s", len(l), k.name, strings.Join(l[:min(len(l), 10)], ", ")))
		}
	}
	return out
}

// String is the verdict in a line.
func (v Verdict) String() string {
	p := v.Problems()
	if len(p) == 0 {
		return fmt.Sprintf("pass: %d sessions launched, %d logoffs acknowledged, %d sessions in the site DB; none lost, stale, unexpected, duplicated or over a limit",
			v.Launched, v.LoggedOff, v.Sessions)
	}
	return "FAIL: " + strings.Join(p, "; ")
}

// Check compares the site DB's sessions with the history: every
// acknowledged launch's session is there (none lost), live unless a
// logoff was acknowledged after its last launch (none stale); no live
// session that no client was given (none unexpected); no user with two
// live sessions of the desktop (none duplicated); no machine over its
// session limit. Call it once the clients have stopped and their last
// reports have landed.
func (h *History) Check(ctx context.Context, store site.Store) (Verdict, error) {
	var all []site.Session
	var machines []site.Machine
	err := store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{}, site.ListOptions{})
		if err != nil {
			return err
		}
		all = p.Items
		m, err := tx.Machines().List(ctx, site.ListOptions{})
		machines = m.Items
		return err
	})
	if err != nil {
		return Verdict{}, fmt.Errorf("read the site DB's sessions: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v := Verdict{Launched: len(h.launched), LoggedOff: len(h.loggedOff), Sessions: len(all), Indeterminate: h.indeterminate, Errors: map[string]int{}}
	for k, n := range h.errors {
		v.Errors[k] = n
	}
	byID := map[string]site.Session{}
	for _, s := range all {
		byID[s.ID] = s
	}
	for id, at := range h.launched {
		s, ok := byID[id]
		off := h.loggedOff[id].After(at)
		switch {
		case ok && h.unknown[id]:
		case !ok:
			v.Lost = append(v.Lost, id)
		case off && s.State != site.SessionLoggedOff:
			v.Stale = append(v.Stale, id+" (logged off, "+string(s.State)+" in the site DB)")
		case !off && s.State == site.SessionLoggedOff:
			v.Lost = append(v.Lost, id+" (live, logged off in the site DB)")
		}
	}
	live := map[string][]string{}
	perMachine := map[string]int{}
	var unexpected []string
	for _, s := range all {
		if s.State == site.SessionLoggedOff {
			continue
		}
		perMachine[s.Machine]++
		if _, acked := h.launched[s.ID]; !acked {
			unexpected = append(unexpected, s.ID)
		} else if s.Resource == h.resource {
			live[s.User] = append(live[s.User], s.ID)
		}
	}
	if len(unexpected) > h.indeterminate {
		v.Unexpected = unexpected
	} else if len(unexpected) > 0 {
		v.Notes = append(v.Notes, fmt.Sprintf("%d live sessions no client was told of, from %d launches of unknown outcome (tolerated)", len(unexpected), h.indeterminate))
	}
	for u, ids := range live {
		if len(ids) > 1 {
			var what []string
			for _, id := range ids {
				x := byID[id]
				w := fmt.Sprintf("%s %s on %s, created %s, updated %s, launched %s", id, x.State, x.Machine,
					x.CreatedAt.Format(time.TimeOnly+".000"), x.UpdatedAt.Format(time.TimeOnly+".000"), h.launched[id].UTC().Format(time.TimeOnly+".000"))
				if at, ok := h.loggedOff[id]; ok {
					w += ", logoff acknowledged " + at.UTC().Format(time.TimeOnly+".000")
				}
				if h.unknown[id] {
					w += ", a logoff of unknown outcome"
				}
				what = append(what, w)
			}
			d := fmt.Sprintf("%s has %d (%s)", u, len(ids), strings.Join(what, "; "))
			if !h.since.IsZero() {
				d += "; marked (the cut) at " + h.since.UTC().Format(time.TimeOnly+".000")
			}
			v.Duplicated = append(v.Duplicated, d)
		}
	}
	if h.StaleOK && len(v.Duplicated) > 0 {
		v.Notes = append(v.Notes, fmt.Sprintf("%d users given a second session instead of theirs after the leader died (tolerated: its records died with it)", len(v.Duplicated)))
		v.Duplicated = nil
	}
	for _, m := range machines {
		if m.MaxSessions > 0 && perMachine[m.Name] > m.MaxSessions {
			v.OverLimit = append(v.OverLimit, fmt.Sprintf("%s: %d > %d", m.Name, perMachine[m.Name], m.MaxSessions))
		}
	}
	return v, nil
}
