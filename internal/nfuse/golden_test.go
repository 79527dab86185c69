package nfuse_test

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden NFuse answers in testdata/golden")

// TestGolden posts each testdata/golden/*.request.xml in name order to one
// handler over the demo site and compares the answer with the
// .response.xml beside it. Requests may use {{TicketTag}}, {{LaunchRef}},
// {{InName}}, {{HostId}} and {{SessionId}}, taken from earlier answers;
// random values (tickets, tags, launch references, session IDs) and icon
// data are replaced by "*" in the comparison.
func TestGolden(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{})
	requests, err := filepath.Glob("testdata/golden/*.request.xml")
	if err != nil || len(requests) == 0 {
		t.Fatalf("no golden requests: %v", err)
	}
	vars := map[string]string{}
	for _, path := range requests {
		name := strings.TrimSuffix(filepath.Base(path), ".request.xml")
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range vars {
			body = []byte(strings.ReplaceAll(string(body), "{{"+k+"}}", v))
		}
		a := f.postBytes(body)
		if a.status != 200 {
			t.Fatalf("%s: status %d", name, a.status)
		}
		mustWellFormed(t, a.body)
		capture(vars, a.body)
		got := normalize(a.body)
		golden := filepath.Join("testdata/golden", name+".response.xml")
		if *update {
			if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%s: %v (run go test -update)", name, err)
		}
		if got != string(want) {
			t.Errorf("%s: answer differs from %s:\ngot:\n%s\nwant:\n%s", name, golden, got, want)
		}
	}
}

var (
	// capturePatterns take the values later requests refer to.
	capturePatterns = map[string]*regexp.Regexp{
		"TicketTag": regexp.MustCompile(`<TicketTag>([^<]*)</TicketTag>`),
		"LaunchRef": regexp.MustCompile(`<LaunchRef>([^<]*)</LaunchRef>`),
		"InName":    regexp.MustCompile(`<SessionName><InName>([^<]*)</InName>`),
		"HostId":    regexp.MustCompile(`<HostId>([^<]*)</HostId>`),
		"SessionId": regexp.MustCompile(`<SessionId>([^<]*)</SessionId>`),
	}
	// randomElements hold values that differ from run to run.
	randomElements = regexp.MustCompile(`<(Ticket|TicketTag|LaunchRef|SessionId|Icon|IconData)( [^>]*)?>[^<]*</(Ticket|TicketTag|LaunchRef|SessionId|Icon|IconData)>`)
)

func capture(vars map[string]string, body string) {
	for k, re := range capturePatterns {
		if m := re.FindStringSubmatch(body); m != nil {
			vars[k] = m[1]
		}
	}
}

func normalize(body string) string {
	return randomElements.ReplaceAllString(body, "<$1$2>*</$3>")
}
