package peer

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/site"
)

// Bounds of the client's calls.
const (
	// DefaultTimeout bounds a call to a peer, answer included.
	DefaultTimeout = 10 * time.Second
	// maxAnswer bounds an answer's body.
	maxAnswer = 16 << 20
)

// ErrUnproven is wrapped by the error of a call whose answer did not
// come with the proof of the broker called: whoever answered does not
// hold the site's peer key, or is not that broker.
var ErrUnproven = errors.New("answer without the peer's proof")

// ClientConfig configures a Client.
type ClientConfig struct {
	// Name is this broker's, as the site's broker registry has it.
	Name string
	// Key is the site's peer key (auth.Signer.Derive("peer")).
	Key []byte
	// HTTP is the client that calls peers: TLS to the site's brokers,
	// with their CA, plugs in here. Default: http.Client with
	// DefaultTimeout.
	HTTP *http.Client
	// Scheme is "http" (the default) or "https".
	Scheme string
	// Now is the clock tokens are issued by (default time.Now).
	Now func() time.Time
}

// Client calls a site's other brokers, and takes only answers that the
// broker called proved.
type Client struct {
	cfg ClientConfig
	key Key

	mu sync.Mutex
	// runs holds each peer's run, as its last proven State told it.
	runs map[string]string
	// contact holds when each peer last gave a proven answer.
	contact map[string]time.Time
}

// NewClient returns the Client of the broker cfg.Name.
func NewClient(cfg ClientConfig) (*Client, error) {
	key, err := NewKey(cfg.Key)
	if err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		return nil, errors.New("peer client: no broker name")
	}
	switch cfg.Scheme {
	case "":
		cfg.Scheme = "http"
	case "http", "https":
	default:
		return nil, fmt.Errorf("peer client: scheme %q is neither http nor https", cfg.Scheme)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: DefaultTimeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Client{cfg: cfg, key: key, runs: map[string]string{}, contact: map[string]time.Time{}}, nil
}

// State asks the peer p whether it brokers from its local copy. An error
// means p did not prove its answer (ErrUnproven) or did not answer: it
// must not be taken for p.
func (c *Client) State(ctx context.Context, p site.BrokerRecord) (State, error) {
	var st State
	if err := c.call(ctx, p, "", OpState, struct{}{}, &st); err != nil {
		return State{}, err
	}
	if st.Name != p.Name {
		return State{}, fmt.Errorf("peer %q at %s: %w: it says it is %q", p.Name, p.Address, ErrUnproven, st.Name)
	}
	c.setRun(p.Name, st.Run)
	return st, nil
}

// Contacted returns when the peer named last gave a proven answer to a
// call of this Client; zero when it never did.
func (c *Client) Contacted(peer string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.contact[peer]
}

func (c *Client) setRun(peer, run string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if run == "" {
		delete(c.runs, peer)
	} else {
		c.runs[peer] = run
	}
}

// Handover hands the peer p this broker's handover, sealed for p alone
// (see sealed), and returns once p proved it took it.
func (c *Client) Handover(ctx context.Context, p site.BrokerRecord, h lhc.Handover) error {
	s, err := c.key.sealHandover(c.cfg.Name, p.Name, h)
	if err != nil {
		return err
	}
	return c.Call(ctx, p, OpLearn, s, nil)
}

// Call sends the peer p the request op with req, for p alone, and
// decodes p's answer into out (nil: none expected). The answer is taken
// only with p's proof of it: otherwise the error wraps ErrUnproven. An
// error answer that p proved keeps its code (site.ErrorCode); a peer that
// does not answer, or stops mid-way, gives EUnavailable. Every error
// names p. Its token is bound to p's run, which a State call learns
// first when p's is not known; a p that restarted since answers
// EUnavailable (retry), and the next call learns its new run.
func (c *Client) Call(ctx context.Context, p site.BrokerRecord, op string, req, out any) error {
	if op == OpState {
		var st State
		if err := c.call(ctx, p, "", op, req, &st); err != nil {
			return err
		}
		c.setRun(p.Name, st.Run)
		return remarshal(st, out)
	}
	c.mu.Lock()
	run := c.runs[p.Name]
	c.mu.Unlock()
	if run == "" {
		st, err := c.State(ctx, p)
		if err != nil {
			return err
		}
		run = st.Run
	}
	return c.call(ctx, p, run, op, req, out)
}

// remarshal copies a State into out (nil: nowhere).
func remarshal(st State, out any) error {
	if out == nil {
		return nil
	}
	if p, ok := out.(*State); ok {
		*p = st
		return nil
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// call is Call with its token bound to the peer's run.
func (c *Client) call(ctx context.Context, p site.BrokerRecord, run, op string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if p.Address == "" {
		return site.Errorf(site.EUnavailable, "peer %q has no address", p.Name)
	}
	token, id := c.key.IssueFor(c.cfg.Name, p.Name, run, op, body, c.cfg.Now())
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.Scheme+"://"+p.Address+Prefix+op, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("peer %q at %s: %w", p.Name, p.Address, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.cfg.HTTP.Do(hr)
	if err != nil {
		return site.Errorf(site.EUnavailable, "peer %q at %s does not answer %s: %v: retry", p.Name, p.Address, op, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return site.Errorf(site.EUnavailable, "peer %q at %s stopped answering %s mid-way: %v: retry", p.Name, p.Address, op, err)
	}
	if len(raw) > maxAnswer {
		return fmt.Errorf("peer %q at %s: the answer to %s is larger than %d bytes", p.Name, p.Address, op, maxAnswer)
	}
	t := Token{From: c.cfg.Name, Op: op, ID: id}
	want := c.key.answerProof(p.Name, t, resp.Header.Get(HeaderNonce), resp.StatusCode, raw)
	got := resp.Header.Get(HeaderProof)
	proven := got != "" && resp.Header.Get(HeaderNonce) != "" && hmac.Equal([]byte(got), []byte(want))
	if !proven {
		if resp.StatusCode == http.StatusServiceUnavailable {
			// Refusals come without a proof: a 503 (busy, or a run
			// that has ended) is taken for no more than "retry", and
			// the run is asked again.
			c.setRun(p.Name, "")
			return site.Errorf(site.EUnavailable, "peer %q at %s cannot take %s now: retry", p.Name, p.Address, op)
		}
		if resp.StatusCode == http.StatusUnauthorized {
			var e errorBody
			if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
				return fmt.Errorf("peer %q at %s refused %s (%s): %w", p.Name, p.Address, op, e.Error.Message, ErrUnproven)
			}
		}
		return fmt.Errorf("peer %q at %s: %s: %w (status %s)", p.Name, p.Address, op, ErrUnproven, resp.Status)
	}
	c.mu.Lock()
	c.contact[p.Name] = c.cfg.Now()
	c.mu.Unlock()
	if resp.StatusCode >= 300 {
		var e errorBody
		if json.Unmarshal(raw, &e) == nil && e.Error.Code != "" {
			return site.Errorf(e.Error.Code, "%s", e.Error.Message)
		}
		return fmt.Errorf("peer %q at %s: %s: %s", p.Name, p.Address, op, resp.Status)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("peer %q at %s: the answer to %s: %w", p.Name, p.Address, op, err)
	}
	return nil
}
