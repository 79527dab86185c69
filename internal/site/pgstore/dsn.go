package pgstore

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usher-vdi/usher/internal/site"
)

// The DSN's password must never reach an error or a log line. pgx's own
// messages leave it out (a connection error names the user and database;
// a parse error masks what it recognizes as a password), and the Store
// masks, in any message it builds from a pgx error, every string that
// could be the password: the parsed one and, for a DSN that does not
// parse, whatever stands where a password would.

const mask = "xxxxx"

// parseDSN parses a DSN into a pool configuration. Its error says what is
// wrong without showing the DSN: pgx's shows it with what it recognizes
// as the password masked, which, in a DSN that does not parse, may be
// only part of it.
func parseDSN(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		msg := scrub(err, dsnSecrets(dsn))
		var pe *pgconn.ParseConfigError
		if errors.As(err, &pe) {
			msg = "cannot parse it"
			if i := strings.LastIndex(err.Error(), "`: "); i >= 0 {
				msg = scrub(errors.New(err.Error()[i+3:]), dsnSecrets(dsn))
			}
		}
		return nil, fmt.Errorf("parse DSN: %s", msg)
	}
	return cfg, nil
}

var (
	// urlPassword is the password of a URL DSN, up to its last '@'.
	urlPassword = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*://[^:@/]*:(.*)@`)
	// kvPassword is a password=... setting of either form of DSN.
	kvPassword = regexp.MustCompile(`(?:password|sslpassword)\s*=\s*(?:'((?:[^'\\]|\\.)*)'|([^\s&]*))`)
)

// dsnSecrets returns what, in a DSN, could be a password: as written and
// percent-decoded.
func dsnSecrets(dsn string) []string {
	var out []string
	add := func(s string) {
		if s == "" {
			return
		}
		out = append(out, s)
		if d, err := url.QueryUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
		if d, err := url.PathUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
	}
	if m := urlPassword.FindStringSubmatch(dsn); m != nil {
		add(m[1])
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		add(m[1])
		add(strings.ReplaceAll(m[1], `\'`, `'`))
		add(m[2])
	}
	return out
}

// secrets returns the passwords a parsed configuration holds.
func secrets(cfg *pgx.ConnConfig) []string {
	out := dsnSecrets(cfg.ConnString())
	if cfg.Password != "" {
		out = append(out, cfg.Password)
	}
	return out
}

// scrub returns err's message with every secret masked.
func scrub(err error, secret []string) string {
	msg := err.Error()
	for _, s := range secret {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, mask)
		}
	}
	return msg
}

func (s *Store) scrub(err error) string { return scrub(err, s.secret) }

// describe names the database cfg connects to, as a URL without password.
func describe(cfg *pgx.ConnConfig) string {
	u := url.URL{Scheme: "postgres", User: url.User(cfg.User), Path: "/" + cfg.Database}
	q := url.Values{}
	if strings.HasPrefix(cfg.Host, "/") { // a unix socket's directory
		q.Set("host", cfg.Host)
	} else {
		u.Host = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	if sp := cfg.RuntimeParams["search_path"]; sp != "" {
		q.Set("search_path", sp)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// connectError is a failure to connect to the database, told without the
// DSN's password. Its chain holds the server's refusal, when there is one
// (a wrong password, an unknown database), and nothing that holds the
// password.
type connectError struct {
	target string
	msg    string
	pg     *pgconn.PgError
}

func (e *connectError) Error() string { return "connect to " + e.target + ": " + e.msg }

func (e *connectError) Unwrap() error {
	if e.pg == nil {
		return nil
	}
	return e.pg
}

// Is makes a refusal for the server's connection limit match
// site.ErrConnLimit.
func (e *connectError) Is(target error) bool {
	return target == site.ErrConnLimit && e.pg != nil && e.pg.Code == codeTooManyConnections
}

// connectErr describes a failed connection attempt.
func (s *Store) connectErr(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return &connectError{target: s.target, msg: scrub(fmt.Errorf("%s (SQLSTATE %s)", pg.Message, pg.Code), s.secret), pg: pg}
	}
	return &connectError{target: s.target, msg: s.scrub(err)}
}

// Describe names the database dsn connects to, as a URL without its
// password, for logs and messages; "" when dsn does not parse.
func Describe(dsn string) string {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return ""
	}
	return describe(cfg.ConnConfig)
}
