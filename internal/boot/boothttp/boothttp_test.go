package boothttp_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/boot"
	"github.com/usher-vdi/usher/internal/boot/boothttp"
	"github.com/usher-vdi/usher/internal/boot/ext4boot/ext4test"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

type fixture struct {
	t       *testing.T
	srv     *httptest.Server
	store   *sqlitestore.Store
	images  *image.Store
	log     *bytes.Buffer
	targets []site.Target
	counts  map[string]int
	mu      sync.Mutex
	version int64
}

func newFixture(t *testing.T) (*fixture, ext4test.Image) {
	t.Helper()
	return newFixtureWith(t, nil)
}

// newFixtureWith is newFixture with a change to the Handler's Config.
func newFixtureWith(t *testing.T, change func(*boothttp.Config)) (*fixture, ext4test.Image) {
	t.Helper()
	dir := t.TempDir()
	img := ext4test.Build(t, filepath.Join(dir, "v0"), ext4test.Layout{})
	images, err := image.Create(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := images.Import(t.Context(), "kiosk", img.Path); err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(t.Context(), filepath.Join(dir, "site.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := &fixture{t: t, store: store, images: images, log: &bytes.Buffer{}, counts: map[string]int{}}
	stream, _ := boot.ParseStream("nbd://10.0.2.2:10809")
	cfg := boothttp.Config{
		Targets: func() (int64, []site.Target) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.version, f.targets
		},
		Images: boothttp.ImageStore(images),
		Store:  store,
		Script: boot.ScriptOptions{Stream: stream, Append: "console=ttyS0"},
		Logger: slog.New(slog.NewTextHandler(lockedWriter{f}, nil)),
		Count: func(step, outcome string) {
			f.mu.Lock()
			f.counts[step+" "+outcome]++
			f.mu.Unlock()
		},
	}
	if change != nil {
		change(&cfg)
	}
	h, err := boothttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f, img
}

type lockedWriter struct{ f *fixture }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	return w.f.log.Write(p)
}

func (f *fixture) setTargets(ts ...site.Target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets = ts
	f.version++
}

func (f *fixture) get(path string) (int, string) {
	f.t.Helper()
	resp, err := http.Get(f.srv.URL + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func (f *fixture) logged() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log.String()
}

func (f *fixture) boots(target string) []site.BootRecord {
	f.t.Helper()
	var p site.Page[site.BootRecord]
	err := f.store.View(context.Background(), func(tx site.Tx) (err error) {
		p, err = tx.Boots().List(context.Background(), site.BootFilter{Target: target}, site.ListOptions{})
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return p.Items
}

func TestBootOfABoundTarget(t *testing.T) {
	f, img := newFixture(t)
	f.setTargets(site.Target{Name: "kiosk-01", MAC: "52:54:00:00:01:01", Image: "kiosk", Cache: site.CacheServerDisk})

	status, chain := f.get("/boot/script.ipxe")
	if status != 200 || !strings.Contains(chain, "chain /boot/ipxe?mac=${netX/mac:hexhyp}") {
		t.Fatalf("chain script: %d\n%s", status, chain)
	}
	status, script := f.get("/boot/ipxe?mac=52-54-00-00-01-01")
	if status != 200 || !strings.HasPrefix(script, "#!ipxe\n") ||
		!strings.Contains(script, "kernel /boot/t/52-54-00-00-01-01/0/kernel ") ||
		!strings.Contains(script, "nbdroot=10.0.2.2:10809/kiosk@0") ||
		!strings.Contains(script, "initrd /boot/t/52-54-00-00-01-01/0/initrd\n") {
		t.Fatalf("script: %d\n%s", status, script)
	}
	for _, c := range []struct {
		path string
		want []byte
	}{{"/boot/t/52-54-00-00-01-01/0/kernel", img.Kernel}, {"/boot/t/52-54-00-00-01-01/0/initrd", img.Initrd}} {
		status, body := f.get(c.path)
		if status != 200 || body != string(c.want) {
			t.Fatalf("%s: status %d, %d bytes; want the %d bytes in the image", c.path, status, len(body), len(c.want))
		}
	}
	recs := f.boots("kiosk-01")
	if len(recs) != 3 || recs[2].Step != site.BootScript || recs[1].Step != site.BootKernel || recs[0].Step != site.BootInitrd ||
		recs[0].Version != 0 || recs[0].Cache != site.CacheServerDisk || recs[0].Remote == "" {
		t.Fatalf("boot log: %+v", recs)
	}
	if f.counts["script served"] != 1 || f.counts["kernel served"] != 1 || f.counts["initrd served"] != 1 {
		t.Errorf("counts: %v", f.counts)
	}

	// A new version in production changes what the target gets: a
	// different kernel in a filesystem written into version 1.
	next := ext4test.Build(t, t.TempDir(), ext4test.Layout{Versions: []string{"6.1.0-y"}})
	promoteContent(t, f.images, "kiosk", next.Path)
	_, script = f.get("/boot/ipxe?mac=52:54:00:00:01:01")
	if !strings.Contains(script, "/boot/t/52-54-00-00-01-01/1/kernel") || !strings.Contains(script, "kiosk@1") {
		t.Fatalf("script after the promotion:\n%s", script)
	}
	if status, body := f.get("/boot/t/52-54-00-00-01-01/1/kernel"); status != 200 || body != string(next.Kernel) {
		t.Fatalf("kernel of version 1: status %d, %d bytes, not the new kernel", status, len(body))
	}
	// The version the target booted before is no longer its to read.
	if status, body := f.get("/boot/t/52-54-00-00-01-01/0/kernel"); status != 404 || body != boot.RefusalScript(boothttp.NotServed) ||
		!strings.Contains(f.logged(), "boots version 1") {
		t.Fatalf("kernel of the superseded version: %d %q", status, body)
	}
}

// promoteContent writes a disk image into a new version of name and
// promotes it to production.
func promoteContent(t *testing.T, s *image.Store, name, path string) {
	t.Helper()
	ctx := t.Context()
	v, err := s.NewVersion(ctx, name, "next")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := s.OpenVersion(ctx, name, v.Number, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.WriteAt(ctx, data, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.Promote(ctx, name, v.Number); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBootRefusals(t *testing.T) {
	f, _ := newFixture(t)
	nine := 9
	f.setTargets(
		site.Target{Name: "lost", MAC: "52:54:00:00:02:01", Image: "gone", Cache: site.CacheRAM},
		site.Target{Name: "pinned", MAC: "52:54:00:00:02:02", Image: "kiosk", Version: &nine, Cache: site.CacheRAMOverflow},
		site.Target{Name: "kiosk-01", MAC: "52:54:00:00:01:01", Image: "kiosk", Cache: site.CacheServerDisk},
	)
	for _, tc := range []struct {
		name, path string
		status     int
		says, logs string
	}{
		{"unknown MAC", "/boot/ipxe?mac=52:54:00:99:99:99", 404, boothttp.NotServed, "mac=52:54:00:99:99:99"},
		{"no MAC", "/boot/ipxe", 400, "not a MAC address", "bad request"},
		{"bad MAC", "/boot/ipxe?mac=${net0/mac}", 400, "not a MAC address", "bad request"},
		{"missing image", "/boot/ipxe?mac=52:54:00:00:02:01", 404, boothttp.NotServed, `image \"gone\" is not in the image store`},
		{"missing version", "/boot/ipxe?mac=52:54:00:00:02:02", 404, boothttp.NotServed, `image \"kiosk\" has no version 9`},
		{"unknown MAC's kernel", "/boot/t/52-54-00-99-99-99/0/kernel", 404, boothttp.NotServed, "mac=52:54:00:99:99:99"},
		{"a version not bound", "/boot/t/52-54-00-00-01-01/5/kernel", 404, boothttp.NotServed, "boots version 0"},
		{"another file", "/boot/t/52-54-00-00-01-01/0/etc-shadow", 400, "names no target", "bad request"},
		{"outside the boot paths", "/images/kiosk/v0.raw", 404, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := f.get(tc.path)
			if status != tc.status || !strings.Contains(body, tc.says) {
				t.Fatalf("%s: %d %q; want %d saying %q", tc.path, status, body, tc.status, tc.says)
			}
			if tc.says != "" && !strings.HasPrefix(body, "#!ipxe\necho usher: ") {
				t.Errorf("refusal is not an iPXE script that says why: %q", body)
			}
			if !strings.Contains(f.logged(), tc.logs) {
				t.Errorf("the log does not say %q:\n%s", tc.logs, f.logged())
			}
		})
	}
	if recs := f.boots("lost"); len(recs) != 1 || !strings.Contains(recs[0].Error, `image "gone"`) {
		t.Errorf("a refused boot of a known target is not in the boot log: %+v", recs)
	}
	resp, err := http.Post(f.srv.URL+"/boot/ipxe?mac=52:54:00:00:01:01", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}

func TestConcurrentBootsReadTheFilesOnce(t *testing.T) {
	f, img := newFixture(t)
	var ts []site.Target
	for i := range 8 {
		ts = append(ts, site.Target{Name: "pc" + string(rune('a'+i)), MAC: "52:54:00:00:03:0" + string(rune('0'+i)), Image: "kiosk", Cache: site.CacheServerDisk})
	}
	f.setTargets(ts...)
	var wg sync.WaitGroup
	for _, tg := range ts {
		wg.Go(func() {
			status, body := f.get(boot.TargetPath(tg.MAC, 0) + "initrd")
			if status != 200 || body != string(img.Initrd) {
				t.Errorf("%s: %d, %d bytes", tg.Name, status, len(body))
			}
		})
	}
	wg.Wait()
	if n := strings.Count(f.logged(), "boot files read"); n != 1 {
		t.Errorf("the version's files were read %d times for 8 concurrent boots, want once", n)
	}
}
