package vdacontrol

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// Errors callers branch on.
var (
	// ErrPlainControl refuses to send a control token to an http://
	// control URL off loopback, unless Options.AllowPlain.
	ErrPlainControl = errors.New("vda control: the control URL is http:// off loopback: the control token would cross the network in clear")
	// ErrWrongCertificate is a control listener that shows another
	// certificate than the one its VDA registered: someone else is at
	// the machine's control address, and gets no control token.
	ErrWrongCertificate = errors.New("the control listener's certificate is not the one its VDA registered")
)

// Options configures a Client.
type Options struct {
	// CAs verifies https control URLs whose VDA registered no pin; nil
	// means the system roots. A registered pin is verified alone.
	CAs *x509.CertPool
	// AllowPlain lets the control token go to http:// control URLs of
	// hosts off loopback (agents run with --insecure-listen). Loopback
	// control URLs (simulated VDAs) are always allowed.
	AllowPlain bool
	// Timeout bounds one call; 0 means DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout bounds one call to a VDA.
const DefaultTimeout = 30 * time.Second

// maxPinned bounds the connection pools kept for pinned VDAs: one per
// certificate, as a pooled connection must only carry requests for the
// pin its handshake was checked against. Past it the least recently used
// is closed.
const maxPinned = 4096

// Client reaches VDAs' control endpoints over HTTP and HTTPS.
type Client struct {
	opts  Options
	plain *http.Client // http:// and https:// verified against CAs

	mu     sync.Mutex
	pinned map[string]*pinnedClient
	tick   uint64
}

type pinnedClient struct {
	http *http.Client
	used uint64
}

var _ broker.VDAControl = (*Client)(nil)

// New returns a client with the default Options: https control URLs
// verified by their pin or the system roots, no clear token off
// loopback.
func New() *Client { return NewWith(Options{}) }

// NewWith returns a client with connection reuse sized for many VDAs.
func NewWith(opts Options) *Client {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	tr := newTransport(&tls.Config{MinVersion: tlsconf.MinVersion, RootCAs: opts.CAs})
	return &Client{opts: opts, plain: &http.Client{Transport: tr, Timeout: opts.Timeout}, pinned: map[string]*pinnedClient{}}
}

func newTransport(cfg *tls.Config) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.MaxIdleConns = 4096
	tr.TLSClientConfig = cfg
	return tr
}

// CloseIdleConnections closes the idle connections to every VDA.
func (c *Client) CloseIdleConnections() {
	c.plain.CloseIdleConnections()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pinned {
		p.http.CloseIdleConnections()
	}
}

// httpFor returns the client for a control URL: one of its own for a
// pin, the shared one otherwise.
func (c *Client) httpFor(to broker.Control, u *url.URL) (*http.Client, error) {
	switch {
	case u.Scheme == "http" && to.Pin != "":
		return nil, fmt.Errorf("vda control: machine %q registered a certificate pin with a clear control URL %s", to.Machine, to.URL)
	case u.Scheme == "http" && !c.opts.AllowPlain && !tlsconf.LoopbackAddr(u.Host):
		return nil, fmt.Errorf("machine %q at %s: %w (its agent needs --tls-cert and --tls-key, or the site must allow clear control URLs)",
			to.Machine, to.URL, ErrPlainControl)
	case u.Scheme == "http" || to.Pin == "":
		return c.plain, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	if p := c.pinned[to.Pin]; p != nil {
		p.used = c.tick
		return p.http, nil
	}
	if len(c.pinned) >= maxPinned {
		var oldest string
		for pin, p := range c.pinned {
			if oldest == "" || p.used < c.pinned[oldest].used {
				oldest = pin
			}
		}
		c.pinned[oldest].http.CloseIdleConnections()
		delete(c.pinned, oldest)
	}
	p := &pinnedClient{http: &http.Client{Transport: newTransport(tlsconf.PinnedConfig(to.Pin)), Timeout: c.opts.Timeout}, used: c.tick}
	c.pinned[to.Pin] = p
	return p.http, nil
}

// Prepare tells a VDA a session is coming. The VDA gets the ticket's hash,
// never the ticket.
func (c *Client) Prepare(ctx context.Context, to broker.Control, p broker.Prepare) error {
	return c.post(ctx, to, vdaproto.PathPrepare, prepareRequest(p))
}

func prepareRequest(p broker.Prepare) vdaproto.PrepareRequest {
	return vdaproto.PrepareRequest{SessionID: p.SessionID, User: p.User, Resource: p.Resource, CommandLine: p.CommandLine,
		Reconnect: p.Reconnect, TicketHash: vdaproto.TicketHash(p.Ticket), ExpiresAt: p.ExpiresAt,
		IdleDisconnectMS: p.IdleDisconnect.Milliseconds()}
}

// Logoff asks a VDA to log a session off.
func (c *Client) Logoff(ctx context.Context, to broker.Control, id string) error {
	return c.post(ctx, to, vdaproto.PathLogoff, vdaproto.SessionRequest{SessionID: id})
}

// Disconnect asks a VDA to disconnect a session.
func (c *Client) Disconnect(ctx context.Context, to broker.Control, id string) error {
	return c.post(ctx, to, vdaproto.PathDisconnect, vdaproto.SessionRequest{SessionID: id})
}

// post sends body to the VDA. It refuses, before anything goes out, a
// clear control URL off loopback (ErrPlainControl) and, at the
// handshake, a listener that shows another certificate than the pinned
// one (ErrWrongCertificate): the token goes to neither.
func (c *Client) post(ctx context.Context, to broker.Control, path string, body any) error {
	if to.URL == "" {
		return fmt.Errorf("vda control: no control URL registered")
	}
	u, err := url.Parse(to.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("vda control: machine %q: control URL %q is not http(s)", to.Machine, to.URL)
	}
	hc, err := c.httpFor(to, u)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimSuffix(to.URL, "/")+path, bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("vda control: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+to.Token)
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, tlsconf.ErrPinMismatch) {
			return fmt.Errorf("vda control %s: machine %q at %s: %w: %w", path, to.Machine, to.URL, ErrWrongCertificate, err)
		}
		return fmt.Errorf("vda control %s: machine %q: %w", path, to.Machine, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil
	}
	var e vdaproto.ErrorBody
	json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
	if resp.StatusCode == http.StatusNotFound && e.Error.Code == site.ENotFound {
		return fmt.Errorf("vda control %s: %s: %s: %w", path, resp.Status, e.Error.Message, broker.ErrNoSuchSession)
	}
	return fmt.Errorf("vda control %s: %s: %s", path, resp.Status, e.Error.Message)
}
