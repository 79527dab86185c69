package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// REST flow steps, each also a phase of the transaction.
const (
	StepLogin     = "login"     // POST /api/v1/login {username, password} for a bearer token
	StepEnumerate = "enumerate" // GET /api/v1/resources
	StepLaunch    = "launch"    // POST /api/v1/resources/NAME/launch
	StepLogoff    = "logoff"    // POST /api/v1/sessions/ID/logoff
)

// ParseFlow reads a comma-separated flow: "login,enumerate,launch,logoff".
func ParseFlow(s string) ([]string, error) {
	var flow []string
	for _, step := range strings.Split(s, ",") {
		step = strings.TrimSpace(step)
		switch step {
		case StepLogin, StepEnumerate, StepLaunch, StepLogoff:
			flow = append(flow, step)
		default:
			return nil, fmt.Errorf("flow step %q is not login, enumerate, launch or logoff", step)
		}
	}
	return flow, nil
}

// REST is a user's flow through usher's REST API as a Target: each
// transaction runs Flow for user Users.At(i), and each step is timed as a
// phase of its own.
//
// A flow without login uses the user's token from an earlier transaction
// or LogOn; with ReuseTokens, login runs only for users without one. A
// launch starts Resources[i mod len], or without Resources the first
// resource that enumerate listed. A logoff ends the session this
// transaction launched; sessions launched without one are remembered, for
// LogoffAll.
type REST struct {
	Client      *http.Client
	BaseURL     string // http://host:port
	Users       Users
	Flow        []string
	Resources   []string
	ReuseTokens bool
	ClientName  string

	tokens   sync.Map // user → token
	once     sync.Once
	mu       sync.Mutex
	sessions map[string][]string // user → sessions launched and not logged off
	nsess    atomic.Int64
}

// Check reports whether the flow can run.
func (r *REST) Check() error {
	switch {
	case len(r.Users) == 0:
		return fmt.Errorf("the REST flow needs users")
	case len(r.Flow) == 0:
		return fmt.Errorf("the REST flow is empty")
	}
	if _, err := url.Parse(r.BaseURL); err != nil {
		return fmt.Errorf("base URL: %w", err)
	}
	launch, enumerated := false, false
	for _, s := range r.Flow {
		switch s {
		case StepEnumerate:
			enumerated = true
		case StepLaunch:
			launch = true
			if len(r.Resources) == 0 && !enumerated {
				return fmt.Errorf("a launch needs resources to launch, or an enumerate before it")
			}
		case StepLogoff:
			if !launch {
				return fmt.Errorf("a logoff needs a launch before it")
			}
		}
	}
	return nil
}

func (r *REST) client() *http.Client {
	r.once.Do(func() {
		if r.Client == nil {
			r.Client = NewClient(100)
		}
	})
	return r.Client
}

// Do implements Target.
func (r *REST) Do(ctx context.Context, i int64) error {
	c := r.Users.At(i)
	name := c.User
	if c.Domain != "" {
		name = c.Domain + `\` + c.User
	}
	var token, resource, session string
	if v, ok := r.tokens.Load(name); ok {
		token = v.(string)
	}
	for _, step := range r.Flow {
		start := time.Now()
		var err error
		switch step {
		case StepLogin:
			if token != "" && r.ReuseTokens {
				continue
			}
			token, err = r.login(ctx, name, c.Password)
		case StepEnumerate:
			resource, err = r.enumerate(ctx, token, len(r.Resources) == 0)
		case StepLaunch:
			if len(r.Resources) > 0 {
				resource = r.Resources[i%int64(len(r.Resources))]
			}
			session, err = r.launch(ctx, token, resource)
		case StepLogoff:
			err = r.logoff(ctx, token, session)
			session = ""
		}
		ObservePhase(ctx, step, time.Since(start))
		if err != nil {
			return fmt.Errorf("%s: %w", step, err)
		}
		if step == StepLogin {
			r.tokens.Store(name, token)
		}
	}
	if session != "" {
		r.mu.Lock()
		if r.sessions == nil {
			r.sessions = map[string][]string{}
		}
		r.sessions[name] = append(r.sessions[name], session)
		r.mu.Unlock()
		r.nsess.Add(1)
	}
	return nil
}

// LogOn logs every user on, conc at a time, and keeps their tokens: the
// untimed preparation of a run whose flow does not log on.
func (r *REST) LogOn(ctx context.Context, conc int) error {
	return parallel(ctx, len(r.Users), conc, func(k int) error {
		c := r.Users[k]
		name := c.User
		if c.Domain != "" {
			name = c.Domain + `\` + c.User
		}
		if _, ok := r.tokens.Load(name); ok {
			return nil
		}
		tok, err := r.login(ctx, name, c.Password)
		if err != nil {
			return fmt.Errorf("log %s on: %w", name, err)
		}
		r.tokens.Store(name, tok)
		return nil
	})
}

// Sessions returns how many sessions were launched and not logged off.
func (r *REST) Sessions() int64 { return r.nsess.Load() }

// LogoffAll logs off the sessions launched without a logoff, conc at a
// time, and returns how many it ended.
func (r *REST) LogoffAll(ctx context.Context, conc int) (int, error) {
	r.mu.Lock()
	type item struct{ user, id string }
	var items []item
	for u, ids := range r.sessions {
		for _, id := range ids {
			items = append(items, item{u, id})
		}
	}
	r.sessions = nil
	r.nsess.Store(0)
	r.mu.Unlock()
	var done atomic.Int64
	err := parallel(ctx, len(items), conc, func(k int) error {
		v, ok := r.tokens.Load(items[k].user)
		if !ok {
			return fmt.Errorf("no token for %s", items[k].user)
		}
		if err := r.logoff(ctx, v.(string), items[k].id); err != nil {
			return fmt.Errorf("log off %s: %w", items[k].id, err)
		}
		done.Add(1)
		return nil
	})
	return int(done.Load()), err
}

func (r *REST) login(ctx context.Context, name, password string) (string, error) {
	body, _ := json.Marshal(map[string]string{"username": name, "password": password})
	var out struct {
		Token string `json:"token"`
	}
	if err := r.call(ctx, http.MethodPost, "/api/v1/login", "", body, &out); err != nil {
		return "", err
	}
	if out.Token == "" {
		return "", Errorf(KindMismatch, "login answer has no token")
	}
	return out.Token, nil
}

func (r *REST) enumerate(ctx context.Context, token string, pick bool) (string, error) {
	if !pick {
		return "", r.call(ctx, http.MethodGet, "/api/v1/resources", token, nil, nil)
	}
	var out struct {
		Resources []struct {
			Name string `json:"name"`
		} `json:"resources"`
	}
	if err := r.call(ctx, http.MethodGet, "/api/v1/resources", token, nil, &out); err != nil {
		return "", err
	}
	if len(out.Resources) == 0 {
		return "", Errorf(KindMismatch, "the user has no resources")
	}
	return out.Resources[0].Name, nil
}

func (r *REST) launch(ctx context.Context, token, resource string) (string, error) {
	var body []byte
	if r.ClientName != "" {
		body, _ = json.Marshal(map[string]string{"client_name": r.ClientName})
	}
	var out struct {
		SessionID string `json:"session_id"`
	}
	if err := r.call(ctx, http.MethodPost, "/api/v1/resources/"+url.PathEscape(resource)+"/launch", token, body, &out); err != nil {
		return "", err
	}
	if out.SessionID == "" {
		return "", Errorf(KindMismatch, "launch answer has no session")
	}
	return out.SessionID, nil
}

func (r *REST) logoff(ctx context.Context, token, session string) error {
	return r.call(ctx, http.MethodPost, "/api/v1/sessions/"+url.PathEscape(session)+"/logoff", token, nil, nil)
}

// call performs one API request and decodes a 2xx answer into out (when
// not nil). Other statuses fail with kind http-STATUS and the API's error
// code in the message.
func (r *REST) call(ctx context.Context, method, path, token string, body []byte, out any) error {
	var rd *bytes.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	var req *http.Request
	var err error
	if rd != nil {
		req, err = http.NewRequestWithContext(ctx, method, r.BaseURL+path, rd)
	} else {
		req, err = http.NewRequestWithContext(ctx, method, r.BaseURL+path, nil)
	}
	if err != nil {
		return &Error{Kind: KindOther, Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	code, buf, err := send(r.client(), req, true)
	defer putBuf(buf)
	if err != nil {
		return err
	}
	if code < 200 || code > 299 {
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		json.Unmarshal(buf.Bytes(), &e)
		return Errorf(StatusKind(code), "status %d %s", code, e.Error.Code)
	}
	if out != nil {
		if err := json.Unmarshal(buf.Bytes(), out); err != nil {
			return Errorf(KindMismatch, "decode answer: %v", err)
		}
	}
	return nil
}

// parallel runs fn(0..n-1), conc at a time, and returns the first error.
func parallel(ctx context.Context, n, conc int, fn func(int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(max(conc, 1), max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= n {
					return
				}
				if err := fn(k); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
