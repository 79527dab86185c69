package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/server"
)

// adminOutage shows or forces a running broker's outage mode (its Local
// Host Cache) through its admin API: status, force (broker from the local
// copy, leaving the site DB alone, as for its maintenance or a
// disaster-recovery test), or clear.
func (m *Main) adminOutage(ctx context.Context, args []string) error {
	fs := m.flagSet("admin outage", "status|force|clear [--server URL] [--admin NAME] [--password-stdin]")
	serverURL := fs.String("server", "http://"+server.DefaultListen, "base URL of the running usher broker")
	admin := fs.String("admin", "admin", "admin account to authenticate as (HTTP basic); its password comes from $USHER_ADMIN_PASSWORD or --password-stdin, or use $USHER_ADMIN_TOKEN")
	fromStdin := fs.Bool("password-stdin", false, "read the admin password from standard input")
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"admin outage needs status, force or clear"}
	}
	method, body := http.MethodGet, ""
	switch fs.Arg(0) {
	case "status":
	case "force":
		method, body = http.MethodPut, `{"forced": true}`
	case "clear":
		method, body = http.MethodPut, `{"forced": false}`
	default:
		return usageError{fmt.Sprintf("admin outage %q: want status, force or clear", fs.Arg(0))}
	}
	u := strings.TrimRight(*serverURL, "/") + "/api/v1/admin/outage"
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return usageError{fmt.Sprintf("--server %q: %v", *serverURL, err)}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := m.adminAuth(req, "admin outage", *admin, *fromStdin); err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("outage %s: %w", fs.Arg(0), err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("outage %s: %s", fs.Arg(0), serverMessage(resp, raw))
	}
	var st lhc.Status
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&st); err != nil {
		return fmt.Errorf("outage %s: the answer: %w", fs.Arg(0), err)
	}
	w := m.Stdout
	fmt.Fprintf(w, "mode:          %s", st.Mode)
	if st.Forced {
		fmt.Fprint(w, " (forced)")
	}
	fmt.Fprintf(w, "\nsince:         %s (%s ago)\n", st.Since.Format(time.RFC3339), time.Since(st.Since).Round(time.Second))
	if st.Cause != "" {
		fmt.Fprintf(w, "cause:         %s\n", st.Cause)
	}
	fmt.Fprintf(w, "site DB:       answers %t, last answer %s\n", st.DBAnswers, fmtTime(st.LastAnswer))
	fmt.Fprintf(w, "local copy:    version %d, made %s\n", st.CopyVersion, fmtTime(st.CopyAt))
	if st.CopyError != "" {
		fmt.Fprintf(w, "copy error:    %s\n", st.CopyError)
	}
	fmt.Fprintf(w, "outages:       %d; sessions journaled %d, written back %d\n", st.Outages, st.Journaled, st.WrittenBack)
	return nil
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format(time.RFC3339)
}
