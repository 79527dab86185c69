package image_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block/image"
)

// crashStoreEnv names the store directory of TestPromotionSurvivesSIGKILL's
// child process.
const crashStoreEnv = "USHER_IMAGE_CRASH_STORE"

// TestPromotionSurvivesSIGKILL kills a process that adds and promotes
// versions of an image without a pause, with SIGKILL at moments chosen at
// random, 30 times over the same store: after each kill the store must
// load, and hold the last state the process reported committed or the
// one its next operation was making, never a torn image.json nor a state
// in between. (A kill does not drop what the kernel holds: this proves
// that the store's files are replaced whole; that they are synced is
// atomicfile's part.)
func TestPromotionSurvivesSIGKILL(t *testing.T) {
	if dir := os.Getenv(crashStoreEnv); dir != "" {
		crashPromoter(dir)
		return
	}
	if testing.Short() {
		t.Skip("starts 30 processes")
	}
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.raw")
	must(t, os.WriteFile(src, bytes.Repeat([]byte("base"), 64<<10/4), 0o644))
	store := filepath.Join(dir, "store")
	st, err := image.Create(store)
	must(t, err)
	_, err = st.Import(ctx, "img", src)
	must(t, err)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 34))
	committed := 0
	for round := range 30 {
		// Let the child commit 0 to 5 operations, then kill it at once or
		// up to 3 ms into its next one.
		ops, delay := rng.IntN(6), time.Duration(rng.Int64N(int64(3*time.Millisecond)))
		last, next, n := crashRound(t, store, ops, delay)
		committed += n
		st, err := image.Open(store)
		if err != nil {
			t.Fatalf("round %d: the store does not open after SIGKILL: %v", round, err)
		}
		im, err := st.Get(ctx, "img")
		if err != nil {
			t.Fatalf("round %d: the image does not load after SIGKILL: %v", round, err)
		}
		if got := signature(im); got != last && got != next {
			t.Fatalf("round %d: after SIGKILL the image is\n\t%s\nwant the last committed state\n\t%s\nor the next\n\t%s", round, got, last, next)
		}
		if _, err := st.List(ctx); err != nil {
			t.Fatalf("round %d: the store does not list after SIGKILL: %v", round, err)
		}
		// What production serves still opens and reads.
		d, err := st.OpenVersion(ctx, "img", im.Production(), false)
		if err != nil {
			t.Fatalf("round %d: production version %d does not open after SIGKILL: %v", round, im.Production(), err)
		}
		buf := make([]byte, 4096)
		err = d.ReadAt(ctx, buf, 0)
		d.Close()
		if err != nil {
			t.Fatalf("round %d: production version %d does not read after SIGKILL: %v", round, im.Production(), err)
		}
	}
	if committed < 10 {
		t.Fatalf("the children committed %d operations in 30 rounds: the kills tested little", committed)
	}
	t.Logf("%d operations committed over 30 kills", committed)
}

// crashRound starts a child on store, reads its reports until it has
// committed ops operations, waits delay and kills it. It returns the
// last state the child reported committed, the state its operation then
// in progress makes, and how many operations it committed.
func crashRound(t *testing.T, store string, ops int, delay time.Duration) (last, next string, n int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPromotionSurvivesSIGKILL$")
	cmd.Env = append(os.Environ(), crashStoreEnv+"="+store)
	out, err := cmd.StdoutPipe()
	must(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, out)
	}()
	defer func() {
		cmd.Process.Kill()
		for range lines {
		}
		cmd.Wait()
	}()
	timeout := time.After(time.Minute)
	read := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("the child exited (%s) before it was killed: %s", cmd.ProcessState, stderr.String())
			}
			return l
		case <-timeout:
			t.Fatalf("the child reported nothing for a minute: %s", stderr.String())
		}
		return ""
	}
	// The child says what it loaded, then before each operation what it
	// will make ("next ..."), and after it what it made ("done ...").
	l := read()
	loaded, ok := strings.CutPrefix(l, "loaded ")
	if !ok {
		t.Fatalf("the child's first report is %q", l)
	}
	last, next = loaded, loaded
	for n < ops {
		l := read()
		if s, ok := strings.CutPrefix(l, "next "); ok {
			next = s
			continue
		}
		s, ok := strings.CutPrefix(l, "done ")
		if !ok || s != next {
			t.Fatalf("the child reported %q, want done %s", l, next)
		}
		last, n = s, n+1
	}
	if delay > 0 {
		// Not a wait for anything: the moment of the kill, at random.
		<-time.After(delay)
	}
	cmd.Process.Kill() // SIGKILL
	// Reports written before the kill landed count.
	for l := range lines {
		if s, ok := strings.CutPrefix(l, "next "); ok {
			next = s
		} else if s, ok := strings.CutPrefix(l, "done "); ok {
			last, n = s, n+1
		}
	}
	cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("the child ended (%s) before it was killed: %s", cmd.ProcessState, stderr.String())
	}
	return last, next, n
}

// signature is an image's versions and their states, in order.
func signature(im image.Image) string {
	var b strings.Builder
	for _, v := range im.Versions {
		fmt.Fprintf(&b, "%d:%s ", v.Number, v.State)
	}
	return strings.TrimSpace(b.String())
}

// crashPromoter is the child: it takes the image in dir one step on, for
// ever (a new version in maintenance, written to, then promoted to test
// and to production), saying on stdout what each step will make before
// it and what it made after.
func crashPromoter(dir string) {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	st, err := image.Open(dir)
	if err != nil {
		fail(err)
	}
	im, err := st.Get(ctx, "img")
	if err != nil {
		fail(err)
	}
	w := bufio.NewWriter(os.Stdout)
	report := func(what string, im image.Image) {
		fmt.Fprintf(w, "%s %s\n", what, signature(im))
		w.Flush()
	}
	report("loaded", im)
	for {
		want := im
		want.Versions = append([]image.Version(nil), im.Versions...)
		top := want.Versions[len(want.Versions)-1]
		switch top.State {
		case image.Production, image.Superseded:
			want.Versions = append(want.Versions, image.Version{Number: top.Number + 1, State: image.Maintenance})
			report("next", want)
			v, err := st.NewVersion(ctx, "img", "")
			if err != nil {
				fail(err)
			}
			d, err := st.OpenVersion(ctx, "img", v.Number, true)
			if err != nil {
				fail(err)
			}
			p := bytes.Repeat([]byte{byte(v.Number)}, 4096)
			if err := d.WriteAt(ctx, p, int64(v.Number%16)*4096, 0); err != nil {
				fail(err)
			}
			if err := d.Flush(ctx); err != nil {
				fail(err)
			}
			if err := d.Close(); err != nil {
				fail(err)
			}
		case image.Maintenance:
			want.Versions[len(want.Versions)-1].State = image.Test
			report("next", want)
			if _, err := st.Promote(ctx, "img", top.Number); err != nil {
				fail(err)
			}
		case image.Test:
			for i, v := range want.Versions {
				if v.State == image.Production {
					want.Versions[i].State = image.Superseded
				}
			}
			want.Versions[len(want.Versions)-1].State = image.Production
			report("next", want)
			if _, err := st.Promote(ctx, "img", top.Number); err != nil {
				fail(err)
			}
		}
		if im, err = st.Get(ctx, "img"); err != nil {
			fail(err)
		}
		if signature(im) != signature(want) {
			fail(fmt.Errorf("the step made %s, want %s", signature(im), signature(want)))
		}
		report("done", im)
	}
}
