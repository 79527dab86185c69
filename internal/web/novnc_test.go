package web

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The manifest of the vendored noVNC and the lock file it was vendored
// from, both written by scripts/vendor-novnc.
const (
	novncManifest = "novnc.sha256"
	novncLock     = "../../web/novnc/package-lock.json"
	novncPackage  = "@novnc/novnc"
	novncDir      = "portal/novnc"
)

// TestNoVNCManifest holds the embedded noVNC to the manifest that
// scripts/vendor-novnc wrote: every file listed is embedded with that
// SHA-256, and no other file is, so that a hand edit of a vendored file, a
// file added or one lost fails here. The manifest's header names the
// release and its integrity, which must be the ones the lock file pins:
// a new pin without a new vendoring fails too.
func TestNoVNCManifest(t *testing.T) {
	f, err := os.Open(novncManifest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]string{}
	var header []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			if header == nil {
				header = strings.Fields(rest)
			}
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 || name == "" {
			t.Fatalf("%s:%d: %q is not \"SHA256  PATH\"", novncManifest, n, line)
		}
		want[name] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	var lock struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
		} `json:"packages"`
	}
	b, err := os.ReadFile(novncLock)
	if err == nil {
		err = json.Unmarshal(b, &lock)
	}
	if err != nil {
		t.Fatalf("%s: %v", novncLock, err)
	}
	pin := lock.Packages["node_modules/"+novncPackage]
	if got, want := strings.Join(header, " "), novncPackage+" "+pin.Version+" "+pin.Integrity; got != want {
		t.Errorf("%s names %q; %s pins %q: run scripts/vendor-novnc", novncManifest, got, novncLock, want)
	}

	got := map[string]string{}
	err = fs.WalkDir(portalFS, novncDir, func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := portalFS.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		got[strings.TrimPrefix(name, novncDir+"/")] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, sum := range want {
		switch g, ok := got[name]; {
		case !ok:
			t.Errorf("%s lists %s, which is not embedded", novncManifest, name)
		case g != sum:
			t.Errorf("%s/%s has SHA-256 %s; %s says %s: vendored files are noVNC's, verbatim (scripts/vendor-novnc)", novncDir, name, g, novncManifest, sum)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s/%s is embedded and not in %s", novncDir, name, novncManifest)
		}
	}
	for _, need := range []string{"core/rfb.js", "LICENSE.txt", "docs/LICENSE.MPL-2.0", "vendor/pako/LICENSE"} {
		if _, ok := got[need]; !ok {
			t.Errorf("%s/%s is not embedded", novncDir, need)
		}
	}
}

// evalLike is what a script under script-src 'self' without
// 'unsafe-eval' may not do.
var evalLike = regexp.MustCompile(`\beval\s*\(|\bnew\s+Function\s*\(|\bset(Timeout|Interval)\s*\(\s*["'\x60]`)

// TestPortalScriptsNeedNoEval: the portal's policy has no 'unsafe-eval';
// no script it serves (its own, noVNC's, pako's) evaluates a string.
func TestPortalScriptsNeedNoEval(t *testing.T) {
	n := 0
	err := fs.WalkDir(portalFS, "portal", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(name, ".js") {
			return err
		}
		b, err := portalFS.ReadFile(name)
		if err != nil {
			return err
		}
		n++
		for i, line := range bytes.Split(b, []byte("\n")) {
			if evalLike.Match(line) {
				t.Errorf("%s:%d evaluates a string: %s", name, i+1, bytes.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 40 {
		t.Errorf("%d scripts checked; noVNC's alone are more", n)
	}
}
