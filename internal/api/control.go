package api

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
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// VDAControlClient reaches VDAs' control endpoints over HTTP. It
// implements broker.VDAControl.
type VDAControlClient struct {
	HTTP *http.Client
}

var _ broker.VDAControl = (*VDAControlClient)(nil)

// NewVDAControlClient returns a client with connection reuse sized for
// many VDAs.
func NewVDAControlClient() *VDAControlClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.MaxIdleConns = 4096
	return &VDAControlClient{HTTP: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// Prepare tells a VDA a session is coming.
func (c *VDAControlClient) Prepare(ctx context.Context, to broker.Control, req vdaproto.PrepareRequest) error {
	return c.post(ctx, to, vdaproto.PathPrepare, req)
}

// Logoff asks a VDA to log a session off.
func (c *VDAControlClient) Logoff(ctx context.Context, to broker.Control, id string) error {
	return c.post(ctx, to, vdaproto.PathLogoff, vdaproto.SessionRequest{SessionID: id})
}

// Disconnect asks a VDA to disconnect a session.
func (c *VDAControlClient) Disconnect(ctx context.Context, to broker.Control, id string) error {
	return c.post(ctx, to, vdaproto.PathDisconnect, vdaproto.SessionRequest{SessionID: id})
}

func (c *VDAControlClient) post(ctx context.Context, to broker.Control, path string, body any) error {
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
	return fmt.Errorf("vda control %s: %s: %s", path, resp.Status, e.Error.Message)
}
