package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/usher-vdi/usher/internal/server"
)

// adminUnlock clears an account's lock-out through the running server's
// admin API. Unlike the other admin subcommands it does not open the site
// DB: lock-out state lives in the memory of the server that counted the
// failures (auth.Guard), so only that server can clear it.
func (m *Main) adminUnlock(ctx context.Context, args []string) error {
	fs := m.flagSet("admin unlock", "NAME [--server URL] [--admin NAME] [--password-stdin] [--kind user|admin]")
	serverURL := fs.String("server", "http://"+server.DefaultListen, "base URL of the running usher serve whose lock to clear")
	admin := fs.String("admin", "admin", "admin account to authenticate as (HTTP basic); its password comes from $USHER_ADMIN_PASSWORD or --password-stdin, or use $USHER_ADMIN_TOKEN")
	fromStdin := fs.Bool("password-stdin", false, "read the admin password from standard input")
	kind := fs.String("kind", "user", "the locked account's kind: user or admin")
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"admin unlock needs an account NAME"}
	}
	name := fs.Arg(0)
	u := strings.TrimRight(*serverURL, "/") + "/api/v1/admin/lockouts/" + url.PathEscape(name) + "?kind=" + url.QueryEscape(*kind)
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, u, nil)
	if err != nil {
		return usageError{fmt.Sprintf("--server %q: %v", *serverURL, err)}
	}
	if err := m.adminAuth(req, "admin unlock", *admin, *fromStdin); err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("unlock %q: %w", name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("unlock %q: %s", name, serverMessage(resp, body))
	}
	fmt.Fprintf(m.Stdout, "%s %q: lock-out cleared\n", *kind, name)
	return nil
}

// adminAuth sets req's admin credentials: the admin's password from
// standard input (fromStdin) or $USHER_ADMIN_PASSWORD, or the bearer
// token $USHER_ADMIN_TOKEN.
func (m *Main) adminAuth(req *http.Request, cmd, admin string, fromStdin bool) error {
	switch token := m.Getenv("USHER_ADMIN_TOKEN"); {
	case fromStdin:
		password, err := m.passwordLine()
		if err != nil {
			return err
		}
		req.SetBasicAuth(admin, password)
	case m.Getenv("USHER_ADMIN_PASSWORD") != "":
		req.SetBasicAuth(admin, m.Getenv("USHER_ADMIN_PASSWORD"))
	case token != "":
		req.Header.Set("Authorization", "Bearer "+token)
	default:
		return usageError{cmd + " needs the admin's password (--password-stdin or $USHER_ADMIN_PASSWORD) or $USHER_ADMIN_TOKEN"}
	}
	return nil
}

// passwordLine reads a password, the first line of standard input, for
// the commands' --password-stdin.
func (m *Main) passwordLine() (string, error) {
	line, err := bufio.NewReader(m.Stdin).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("read the password: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// serverMessage is what an admin API's error answer says: its status and
// the message of its JSON error document ({"error": {"code", "message"}}),
// or the body as it is when it is not one.
func serverMessage(resp *http.Response, body []byte) string {
	var doc struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &doc) == nil && doc.Error.Message != "" {
		msg = doc.Error.Message
	}
	if msg == "" {
		return resp.Status
	}
	return resp.Status + ": " + msg
}
