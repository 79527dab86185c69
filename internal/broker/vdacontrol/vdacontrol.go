package vdacontrol

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// Client reaches VDAs' control endpoints over HTTP.
type Client struct {
	HTTP *http.Client
}

var _ broker.VDAControl = (*Client)(nil)

// New returns a client with connection reuse sized for many VDAs.
func New() *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.MaxIdleConns = 4096
	return &Client{HTTP: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// Prepare tells a VDA a session is coming. The VDA gets the ticket's hash,
// never the ticket.
func (c *Client) Prepare(ctx context.Context, to broker.Control, p broker.Prepare) error {
	return c.post(ctx, to, vdaproto.PathPrepare, prepareRequest(p))
}

func prepareRequest(p broker.Prepare) vdaproto.PrepareRequest {
	return vdaproto.PrepareRequest{SessionID: p.SessionID, User: p.User, Resource: p.Resource, CommandLine: p.CommandLine,
		Reconnect: p.Reconnect, TicketHash: vdaproto.TicketHash(p.Ticket), ExpiresAt: p.ExpiresAt}
}

// Logoff asks a VDA to log a session off.
func (c *Client) Logoff(ctx context.Context, to broker.Control, id string) error {
	return c.post(ctx, to, vdaproto.PathLogoff, vdaproto.SessionRequest{SessionID: id})
}

// Disconnect asks a VDA to disconnect a session.
func (c *Client) Disconnect(ctx context.Context, to broker.Control, id string) error {
	return c.post(ctx, to, vdaproto.PathDisconnect, vdaproto.SessionRequest{SessionID: id})
}

func (c *Client) post(ctx context.Context, to broker.Control, path string, body any) error {
	if to.URL == "" {
		return fmt.Errorf("vda control: no control URL registered")
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
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("vda control %s: %w", path, err)
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
