package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/block/image"
)

// mustImage runs usher image with args and fails the test unless it
// succeeds; it returns the output.
func mustImage(t *testing.T, args ...string) string {
	t.Helper()
	code, out, stderr := run(t, "", append([]string{"image"}, args...)...)
	if code != 0 {
		t.Fatalf("usher image %s: exit %d\n%s%s", strings.Join(args, " "), code, out, stderr)
	}
	return out
}

// TestImageErrors checks that each error of usher image says what is
// wrong in one sentence, with the command's prefix once.
func TestImageErrors(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	raw := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.raw")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mustImage(t, "import", "golden", raw, "--store", store)
	mustImage(t, "version", "golden", "--store", store)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"import", "img", ".."}, 1, "usher image: import img: .. is a directory, not a raw disk image"},
		{[]string{"import", "img", dir}, 1, "usher image: import img: " + dir + " is a directory, not a raw disk image"},
		{[]string{"import", "img", filepath.Join(dir, "nope.raw")}, 1, "usher image: import img: " + filepath.Join(dir, "nope.raw") + " does not exist"},
		{[]string{"import", "img", empty}, 1, "usher image: import img: " + empty + " is empty"},
		{[]string{"import", "..", raw}, 1, `usher image: import "..": an image name is up to 128 letters, digits, '.', '_' and '-', starting with a letter or digit`},
		{[]string{"import", "golden", raw}, 1, `usher image: image "golden" already exists`},
		{[]string{"import", ".."}, 2, "usher image: import takes NAME FILE"},
		{[]string{"list", "extra"}, 2, "usher image: list takes no arguments"},
		{[]string{"inspect"}, 2, "usher image: inspect takes NAME [VERSION]"},
		{[]string{"frobnicate"}, 2, `usher image: unknown subcommand "frobnicate": use import, version, promote, merge, list or inspect`},
		{[]string{"inspect", "nope"}, 1, `usher image: image "nope" not found`},
		{[]string{"inspect", "golden", "7"}, 1, `usher image: image "golden" has no version 7`},
		{[]string{"promote", "golden", "x"}, 2, `usher image: version "x" is not a number`},
		{[]string{"promote", "golden", "7"}, 1, `usher image: image "golden" has no version 7`},
		{[]string{"promote", "golden", "0"}, 1, `usher image: version 0 of image "golden" is already in production`},
		{[]string{"version", "golden"}, 1, `usher image: image "golden" already has version 1 in maintenance; promote it before adding another`},
		{[]string{"merge", "golden", "1"}, 1, `usher image: version 1 of image "golden" is in maintenance; promote it first`},
		{[]string{"version", "nope"}, 1, `usher image: image "nope" not found`},
		{[]string{"list", "--store", raw}, 1, "usher image: image store " + raw + " is not a directory"},
	} {
		args := append([]string{"image"}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "--store") {
			args = append(args, "--store", store)
		}
		code, _, stderr := run(t, "", args...)
		if first, _, _ := strings.Cut(stderr, "\n"); code != tc.code || first != tc.want {
			t.Errorf("usher %s: exit %d, %q; want exit %d, %q", strings.Join(args, " "), code, first, tc.code, tc.want)
		}
	}
}

// TestImageAndStreamNeedAStore checks that only usher image import makes
// a store: every other command fails on a missing one, naming it.
func TestImageAndStreamNeedAStore(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo")
	want := "no image store at " + typo + " (usher image import NAME FILE --store " + typo + " creates one)"
	for _, args := range [][]string{
		{"image", "list", "--store", typo},
		{"image", "inspect", "golden", "--store", typo},
		{"image", "version", "golden", "--store", typo},
		{"image", "promote", "golden", "1", "--store", typo},
		{"image", "merge", "golden", "1", "--store", typo},
		{"image", "import", "golden", filepath.Join(dir, "nope.raw"), "--store", typo}, // fails on its source
		{"stream", "--store", typo, "--listen", "127.0.0.1:0"},
	} {
		code, _, stderr := run(t, "", args...)
		if code != 1 {
			t.Errorf("usher %s: exit %d, want 1: %s", strings.Join(args, " "), code, stderr)
		}
		if args[1] != "import" && stderr != "usher "+args[0]+": "+want+"\n" {
			t.Errorf("usher %s: %q, want %q", strings.Join(args, " "), stderr, want)
		}
		if _, err := os.Stat(typo); !os.IsNotExist(err) {
			t.Fatalf("usher %s made the store: %v", strings.Join(args, " "), err)
		}
	}
}

// TestImagePromoteSupersedes checks that promoting a version to
// production supersedes the previous one in list and inspect, and that
// stream serves the new one as IMAGE.
func TestImagePromoteSupersedes(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	raw := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	mustImage(t, "import", "golden", raw, "--store", store)
	mustImage(t, "version", "golden", "--store", store)
	if out := mustImage(t, "promote", "golden", "1", "--store", store); out != "golden version 1 is now in test\n" {
		t.Fatalf("promote to test: %q", out)
	}
	if out := mustImage(t, "promote", "golden", "1", "--store", store); out != "golden version 1 is now in production (version 0 is superseded)\n" {
		t.Fatalf("promote to production: %q", out)
	}
	out := mustImage(t, "inspect", "golden", "--store", store)
	states := regexp.MustCompile(`(?m)^(\d+)\s+\S+\s+\S+\s+(\S+)`).FindAllStringSubmatch(out, -1)
	if len(states) != 2 || states[0][2] != "superseded" || states[1][2] != "production" {
		t.Fatalf("inspect after promoting version 1:\n%s", out)
	}
	if out := mustImage(t, "list", "--store", store); !regexp.MustCompile(`(?m)^golden\s+1048576\s+2\s+1$`).MatchString(out) {
		t.Fatalf("list after promoting version 1:\n%s", out)
	}
}

// TestImageStreamHelp checks that -h documents the version states and
// the standard and private modes.
func TestImageStreamHelp(t *testing.T) {
	for cmd, words := range map[string][]string{
		"image":  {"superseded", "standard", "private", "maintenance"},
		"stream": {"standard", "private", "maintenance", "IMAGE@N"},
	} {
		code, stderr, _ := run(t, "", cmd, "-h") // the usage, on standard output
		if code != 0 {
			t.Fatalf("usher %s -h: exit %d", cmd, code)
		}
		for _, w := range words {
			if !strings.Contains(stderr, w) {
				t.Errorf("usher %s -h does not mention %q:\n%s", cmd, w, stderr)
			}
		}
	}
}

// TestImageInspectDigests checks that inspect shows each version's
// digests: its 64 KiB blocks, distinct and zero, and how many differ
// from its parent's; a maintenance version has none.
func TestImageInspectDigests(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	raw := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	mustImage(t, "import", "golden", raw, "--store", store)
	mustImage(t, "version", "golden", "--store", store)
	st, err := image.Open(store)
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.OpenVersion(ctx, "golden", 1, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 5 << 16, 5<<16 + 100} { // two 64 KiB blocks
		if err := d.WriteAt(ctx, []byte("changed"), off, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(d.Flush(ctx), d.Close()); err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^(\d+)\s+\S+\s+\S+\s+(\S+)\s+\d+\s+\d+\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s`)
	digests := func() map[string][]string {
		out := mustImage(t, "inspect", "golden", "--store", store)
		if !strings.Contains(out, "DIGEST BLOCKS") {
			t.Fatalf("inspect shows no digests:\n%s", out)
		}
		m := map[string][]string{}
		for _, r := range row.FindAllStringSubmatch(out, -1) {
			m[r[1]] = r[2:]
		}
		return m
	}
	got := digests()
	if want := []string{"maintenance", "-", "-", "-", "-"}; !slices.Equal(got["1"], want) {
		t.Fatalf("inspect a maintenance version: %q, want %q", got["1"], want)
	}
	mustImage(t, "promote", "golden", "1", "--store", store)
	got = digests()
	for v, want := range map[string][]string{
		"0": {"production", "16", "1", "16", "-"},
		"1": {"test", "16", "3", "14", "2"},
	} {
		if !slices.Equal(got[v], want) {
			t.Errorf("inspect version %s: %q, want %q (state, digest blocks, distinct, zero, differ from parent)", v, got[v], want)
		}
	}
}
