package loadgen

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/usher-vdi/usher/internal/ctx1"
)

// Credential is one user's logon.
type Credential struct {
	User, Password, Domain string
}

// Users are the credentials a Target logs on with; transaction i uses
// Users[i mod len].
type Users []Credential

// At returns the credential of transaction i.
func (u Users) At(i int64) Credential {
	if len(u) == 0 {
		return Credential{}
	}
	return u[i%int64(len(u))]
}

// LoadUsers reads a users file (see ParseUsers).
func LoadUsers(path string) (Users, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	defer f.Close()
	u, err := ParseUsers(f)
	if err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	return u, nil
}

// ParseUsers reads users in one of two forms:
//
//   - "user:password" lines ("DOMAIN\user:password" for a domain); the
//     password runs to the end of the line; blank lines and lines starting
//     with # are skipped;
//   - CSV with a header row naming the columns user (or username), password
//     and optionally domain, in any order.
//
// A CSV is told by its header: a first line with a comma and a user
// column.
func ParseUsers(r io.Reader) (Users, error) {
	br := bufio.NewReader(r)
	head, _ := br.Peek(4096)
	first, _, _ := strings.Cut(string(head), "\n")
	if cols := csvHeader(first); cols != nil {
		return parseUsersCSV(br, cols)
	}
	var out Users
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimRight(sc.Text(), "\r")
		if t := strings.TrimSpace(text); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		user, password, ok := strings.Cut(text, ":")
		if !ok || strings.TrimSpace(user) == "" {
			return nil, fmt.Errorf("line %d: want user:password", line)
		}
		c := Credential{User: strings.TrimSpace(user), Password: password}
		if d, u, ok := strings.Cut(c.User, `\`); ok {
			c.Domain, c.User = d, u
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no users")
	}
	return out, nil
}

// csvHeader returns the column of user, password and domain (-1 if
// absent) if line is a CSV header, else nil.
func csvHeader(line string) []int {
	if !strings.Contains(line, ",") {
		return nil
	}
	cols := []int{-1, -1, -1}
	for i, name := range strings.Split(strings.TrimSpace(line), ",") {
		switch strings.ToLower(strings.Trim(strings.TrimSpace(name), `"`)) {
		case "user", "username", "user_name":
			cols[0] = i
		case "password":
			cols[1] = i
		case "domain":
			cols[2] = i
		}
	}
	if cols[0] < 0 || cols[1] < 0 {
		return nil
	}
	return cols
}

func parseUsersCSV(r io.Reader, cols []int) (Users, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, err
	}
	var out Users
	for n, rec := range recs[1:] {
		field := func(i int) string {
			if i < 0 || i >= len(rec) {
				return ""
			}
			return rec[i]
		}
		c := Credential{User: strings.TrimSpace(field(cols[0])), Password: field(cols[1]), Domain: strings.TrimSpace(field(cols[2]))}
		if c.User == "" {
			if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
				continue
			}
			return nil, fmt.Errorf("row %d: no user", n+2)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no users")
	}
	return out, nil
}

// Password encodings of NFuse Credentials.
const (
	Cleartext = "cleartext"
	Ctx1      = "ctx1"
)

func encodePassword(password, encoding string) string {
	if encoding == Ctx1 {
		return ctx1.Encode(password)
	}
	return password
}
