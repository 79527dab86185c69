package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
)

// secret is the password of the DSNs below: characters that URLs escape
// and key=value strings quote.
const secret = `Tr0ub4dor&3 s3cret:@/'x`

// passwordServer is a PostgreSQL server that asks for a password, records
// it and refuses it, as a server refuses a wrong one.
func passwordServer(t *testing.T) (host string, port int, got <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	passwords := make(chan string, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go refusePassword(conn, passwords)
		}
	}()
	addr := ln.Addr().(*net.TCPAddr)
	return addr.IP.String(), addr.Port, passwords
}

func refusePassword(conn net.Conn, passwords chan<- string) {
	defer conn.Close()
	be := pgproto3.NewBackend(conn, conn)
	msg, err := be.ReceiveStartupMessage()
	if _, ok := msg.(*pgproto3.SSLRequest); ok && err == nil {
		conn.Write([]byte("N"))
		msg, err = be.ReceiveStartupMessage()
	}
	startup, ok := msg.(*pgproto3.StartupMessage)
	if err != nil || !ok {
		return
	}
	be.Send(&pgproto3.AuthenticationCleartextPassword{})
	if be.Flush() != nil || be.SetAuthType(pgproto3.AuthTypeCleartextPassword) != nil {
		return
	}
	msg, err = be.Receive()
	pw, ok := msg.(*pgproto3.PasswordMessage)
	if err != nil || !ok {
		return
	}
	passwords <- pw.Password
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01",
		Message: fmt.Sprintf("password authentication failed for user %q", startup.Parameters["user"])})
	be.Flush()
}

// wantNoSecret fails the test if err, any error in its chain, or the logs
// show the password, as written or escaped.
func wantNoSecret(t *testing.T, err error, logs *bytes.Buffer) {
	t.Helper()
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret), url.UserPassword("", secret).String(),
		strings.ReplaceAll(secret, `'`, `\'`), "s3cret", "Tr0ub", "'x"}
	var texts []string
	for e := err; e != nil; e = errors.Unwrap(e) {
		texts = append(texts, e.Error(), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e))
	}
	texts = append(texts, logs.String())
	for _, text := range texts {
		for _, f := range forms {
			if strings.Contains(text, f) {
				t.Fatalf("the password shows in %q", text)
			}
		}
	}
}

func TestPasswordIsNeverShown(t *testing.T) {
	host, port, got := passwordServer(t)
	for _, tc := range []struct {
		name string
		dsn  string
	}{
		{"URL", (&url.URL{Scheme: "postgres", User: url.UserPassword("alice", secret), Host: net.JoinHostPort(host, strconv.Itoa(port)),
			Path: "/site", RawQuery: "sslmode=disable"}).String()},
		{"KeyValue", fmt.Sprintf("host=%s port=%d user=alice password='%s' dbname=site sslmode=disable", host, port, strings.ReplaceAll(secret, `'`, `\'`))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			_, err := pgstore.Open(context.Background(), tc.dsn, pgstore.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err == nil {
				t.Fatal("open with a wrong password succeeded")
			}
			if sent := <-got; sent != secret {
				t.Fatalf("the server got password %q, want the DSN's", sent)
			}
			t.Log(err)
			wantNoSecret(t, err, &logs)
			if msg := err.Error(); !strings.Contains(msg, `password authentication failed for user "alice"`) || !strings.Contains(msg, "alice@"+net.JoinHostPort(host, strconv.Itoa(port))+"/site") {
				t.Fatalf("error %q does not say that alice's password was refused by %s:%d", msg, host, port)
			}
			var pg *pgconn.PgError
			// A refused logon is not a database that does not answer:
			// retrying (serve --db-retry) would not change it.
			if site.ErrorCode(err) != site.EUnauthorized || !errors.As(err, &pg) || pg.Code != "28P01" {
				t.Fatalf("error %v: want code %s and the server's refusal (28P01) in its chain", err, site.EUnauthorized)
			}
		})
	}
}

func TestPasswordIsNeverShownForBadDSNs(t *testing.T) {
	for _, dsn := range []string{
		"postgres://alice:" + url.QueryEscape(secret) + "@127.0.0.1:notaport/site",
		"postgres://alice:" + secret + "@127.0.0.1:5432/site",       // not escaped
		"postgres://alice:" + secret + "@[::1/site?sslmode=disable", // malformed host
		fmt.Sprintf("host=127.0.0.1 port=notaport user=alice password='%s'", strings.ReplaceAll(secret, `'`, `\'`)),
		"host=127.0.0.1 user=alice password=" + strings.ReplaceAll(secret, " ", "") + " sslmode=bogus",
		"postgres://alice:" + url.QueryEscape(secret) + "@127.0.0.1:1/site?sslmode=disable&connect_timeout=5", // nothing listens
	} {
		t.Run("", func(t *testing.T) {
			var logs bytes.Buffer
			_, err := pgstore.Open(context.Background(), dsn, pgstore.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err == nil {
				t.Fatal("open succeeded")
			}
			t.Log(err)
			wantNoSecret(t, err, &logs)
		})
	}
}
