package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Sample is one sample of a Prometheus text page: a metric's name (a
// histogram's series with their suffix: _sum, _count, _bucket), its labels
// and its value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape reads the Prometheus text page at url (a server's /metrics) with
// client and gives each sample to visit, in the page's order. It returns
// an error when the page cannot be read whole (visit may have seen part
// of it then), when the answer is not 200 OK, or as ParseMetrics.
func Scrape(ctx context.Context, client *http.Client, url string, visit func(Sample)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := ParseMetrics(resp.Body, visit); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// ParseMetrics reads a Prometheus text page (the exposition format's
// samples, with comments and blank lines skipped) and gives each sample to
// visit. It returns an error at the first line that is no sample (a value
// that is no number, labels that do not close).
func ParseMetrics(r io.Reader, visit func(Sample)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return fmt.Errorf("metrics line %q: %w", line, err)
		}
		visit(s)
	}
	return sc.Err()
}

// parseSample parses name{k="v",...} value [timestamp].
func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if line == "" {
				return s, fmt.Errorf("labels do not close")
			}
			if line[0] == '}' {
				line = line[1:]
				break
			}
			k, rest, ok := strings.Cut(line, "=")
			if !ok || len(rest) == 0 || rest[0] != '"' {
				return s, fmt.Errorf("label %q has no quoted value", k)
			}
			v, n, err := unquote(rest)
			if err != nil {
				return s, fmt.Errorf("label %q: %w", k, err)
			}
			s.Labels[strings.TrimSpace(k)], line = v, rest[n:]
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, err
	}
	s.Value = v
	return s, nil
}

// unquote reads a quoted label value at the start of s (with the
// format's escapes \\, \" and \n) and returns it and the bytes it took.
func unquote(s string) (string, int, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), i + 1, nil
		case '\\':
			if i+1 == len(s) {
				return "", 0, fmt.Errorf("unterminated value")
			}
			i++
			if s[i] == 'n' {
				b.WriteByte('\n')
			} else {
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, fmt.Errorf("unterminated value")
}
