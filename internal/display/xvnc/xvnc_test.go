package xvnc_test

import (
	"context"
	"errors"
	"image/color"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/display/rfb"
	"github.com/usher-vdi/usher/internal/display/xvnc"
	"github.com/usher-vdi/usher/internal/display/xvnc/xvnctest"
)

// blue is the colour the tests' desktops paint their root window.
var blue = color.RGBA{R: 0x1f, G: 0x6f, B: 0xeb, A: 0xff}

const paintBlue = "xsetroot -solid '#1f6feb'"

func me(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

func newStarter(t *testing.T, mod func(*xvnc.Config)) *xvnc.Starter {
	t.Helper()
	cfg := xvnc.Config{Dir: t.TempDir(), Geometry: "320x240", Account: me(t), DesktopCommand: paintBlue, StopTimeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	st, err := xvnc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func start(t *testing.T, st *xvnc.Starter, s xvnc.Session) *xvnc.Display {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := st.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })
	return d
}

// awaitColour reads the display over c until the pixel at x, y is want.
func awaitColour(t *testing.T, c net.Conn, x, y int, want color.RGBA) *rfb.Client {
	t.Helper()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	defer c.SetDeadline(time.Time{})
	cl, err := rfb.Handshake(c, rfb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got color.RGBA
	if err := cl.Await(func(cl *rfb.Client) bool { got, _ = cl.Pixel(x, y); return got == want }); err != nil {
		t.Fatalf("waiting for pixel %d,%d to be %v (it is %v): %v", x, y, want, got, err)
	}
	return cl
}

func TestNewWithoutXvnc(t *testing.T) {
	for _, prog := range []string{"/nonexistent/Xvnc", "no-such-xvnc-here"} {
		_, err := xvnc.New(xvnc.Config{Program: prog})
		if !errors.Is(err, xvnc.ErrNotInstalled) || !strings.Contains(err.Error(), "install tigervnc-standalone-server") ||
			!strings.Contains(err.Error(), prog) {
			t.Errorf("New with Program %q: %v, want ErrNotInstalled naming the package and the program", prog, err)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	sh, err := exec.LookPath("sh") // any program will do: New only looks it up
	if err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct {
		name string
		cfg  xvnc.Config
		says string
	}{
		{"geometry", xvnc.Config{Geometry: "big"}, `"big" is not WxH`},
		{"tiny geometry", xvnc.Config{Geometry: "8x8"}, "16 to 16384"},
		{"directory", xvnc.Config{Dir: "/nonexistent/dir"}, "display directory"},
		{"account", xvnc.Config{Account: "no-such-account-here"}, "no-such-account-here"},
		{"account name", xvnc.Config{Account: "../etc"}, "not a Unix account name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Program = sh
			if _, err := xvnc.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New(%+v) = %v, want an error saying %q", tc.cfg, err, tc.says)
			}
		})
	}
}

func TestAccountName(t *testing.T) {
	for in, want := range map[string]string{
		`OFFICE\Alice`:       "alice",
		"bob@office.example": "bob",
		"carol":              "carol",
		`A\B\Dave`:           "dave",
	} {
		if got := xvnc.AccountName(in); got != want {
			t.Errorf("AccountName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDisplay(t *testing.T) {
	xvnctest.Need(t)
	st := newStarter(t, func(c *xvnc.Config) { c.MaxDisplays = 1 })
	ctx := context.Background()
	d := start(t, st, xvnc.Session{ID: "s-1", User: `OFFICE\someone`, Resource: "Desktop"})

	t.Run("serves the desktop's pixels", func(t *testing.T) {
		c, err := d.Dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cl := awaitColour(t, c, 160, 120, blue)
		if got := cl.Init(); got.Width != 320 || got.Height != 240 || got.Name != "Desktop" {
			t.Errorf("ServerInit = %+v, want 320x240 named Desktop", got)
		}
	})
	t.Run("keeps its files to the account", func(t *testing.T) {
		env := d.Environ()
		var xauth string
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "XAUTHORITY="); ok {
				xauth = v
			}
		}
		if !strings.Contains(strings.Join(env, " "), "DISPLAY="+d.Name()) || xauth == "" {
			t.Fatalf("Environ() = %q, want DISPLAY=%s and XAUTHORITY", env, d.Name())
		}
		dir := filepath.Dir(xauth)
		for path, want := range map[string]os.FileMode{dir: os.ModeDir | 0o700, xauth: 0o600, filepath.Join(dir, "rfb.sock"): os.ModeSocket | 0o600} {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != want {
				t.Errorf("%s has mode %v, want %v", path, fi.Mode(), want)
			}
		}
		if d.Account() != me(t) {
			t.Errorf("Account() = %q, want %q", d.Account(), me(t))
		}
	})
	t.Run("wants its X authority", func(t *testing.T) {
		cmd := exec.Command("xsetroot", "-solid", "red")
		cmd.Env = []string{"DISPLAY=" + d.Name(), "XAUTHORITY=/nonexistent", "PATH=" + os.Getenv("PATH")}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Fatalf("xsetroot without the display's cookie succeeded: %s", out)
		}
	})
	t.Run("refuses a second display beyond MaxDisplays", func(t *testing.T) {
		if _, err := st.Start(ctx, xvnc.Session{ID: "s-2", User: "x"}); !errors.Is(err, xvnc.ErrNoCapacity) {
			t.Fatalf("Start beyond MaxDisplays: %v, want ErrNoCapacity", err)
		}
	})
	t.Run("stops", func(t *testing.T) {
		dir := filepath.Dir(strings.TrimPrefix(d.Environ()[1], "XAUTHORITY="))
		if err := d.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-d.Done():
		default:
			t.Fatal("Done is open after Stop")
		}
		if err := d.Err(); err != nil {
			t.Errorf("Err() after Stop = %v, want nil", err)
		}
		if _, err := d.Dial(ctx); !errors.Is(err, xvnc.ErrStopped) {
			t.Errorf("Dial after Stop: %v, want ErrStopped", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the session directory is still there: %v", err)
		}
		if n := st.Running(); n != 0 {
			t.Errorf("Running() = %d after Stop", n)
		}
	})
}

func TestDisplayDiesOnItsOwn(t *testing.T) {
	xvnctest.Need(t)
	st := newStarter(t, nil)
	d := start(t, st, xvnc.Session{ID: "s-1", User: "x", CommandLine: "sleep 600"})
	other := start(t, st, xvnc.Session{ID: "s-2", User: "x"})
	if d.Number() == other.Number() {
		t.Fatalf("two displays share the number %d", d.Number())
	}
	if err := syscall.Kill(d.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("Done did not close after Xvnc was killed")
	}
	if err := d.Err(); err == nil || !strings.Contains(err.Error(), "stopped on its own") {
		t.Errorf("Err() = %v, want why Xvnc stopped", err)
	}
	if err := d.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := st.Running(); n != 1 {
		t.Errorf("Running() = %d, want the other display", n)
	}
}

func TestStartFailures(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	t.Run("Xvnc exits", func(t *testing.T) {
		st := newStarter(t, func(c *xvnc.Config) {
			c.Program = script("fails", "echo 'Fatal server error: no screens found' >&2; exit 1")
		})
		_, err := st.Start(ctx, xvnc.Session{ID: "s-1", User: "x"})
		if err == nil || !strings.Contains(err.Error(), "no screens found") || !strings.Contains(err.Error(), "s-1") {
			t.Fatalf("Start of a failing Xvnc: %v, want its last words and the session", err)
		}
		if n := st.Running(); n != 0 {
			t.Errorf("Running() = %d after a failed start", n)
		}
	})
	t.Run("Xvnc never ready", func(t *testing.T) {
		st := newStarter(t, func(c *xvnc.Config) {
			c.Program = script("hangs", "exec sleep 600")
			c.StartTimeout = 200 * time.Millisecond
		})
		_, err := st.Start(ctx, xvnc.Session{ID: "s-1", User: "x"})
		if err == nil || !strings.Contains(err.Error(), "did not become ready") {
			t.Fatalf("Start of an Xvnc that never gets ready: %v", err)
		}
	})
	t.Run("mapped account is root", func(t *testing.T) {
		xvnctest.Need(t)
		st := newStarter(t, func(c *xvnc.Config) { c.Account = "" })
		_, err := st.Start(ctx, xvnc.Session{ID: "s-1", User: `OFFICE\Root`})
		if err == nil || !strings.Contains(err.Error(), "root") {
			t.Fatalf("Start for a user named root: %v, want a refusal", err)
		}
	})
}

// TestDisplayAsAnotherAccount: an agent running as root runs the display
// and the desktop as the session's account, whose directory it is.
func TestDisplayAsAnotherAccount(t *testing.T) {
	xvnctest.Need(t)
	if os.Geteuid() != 0 {
		t.Skip("only root runs displays as another account")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip(err)
	}
	// The sessions' directories go in a directory the account may reach.
	parent, err := os.MkdirTemp("", "usher-xvnc-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	st := newStarter(t, func(c *xvnc.Config) { c.Account, c.Dir = "nobody", parent })
	d := start(t, st, xvnc.Session{ID: "s-1", User: "x"})
	status, err := os.ReadFile("/proc/" + strconv.Itoa(d.Pid()) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^Uid:\s+` + nobody.Uid + `\s`).Match(status) {
		t.Errorf("Xvnc does not run as nobody (uid %s):\n%s", nobody.Uid, status)
	}
	dir := filepath.Dir(strings.TrimPrefix(d.Environ()[1], "XAUTHORITY="))
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; strconv.Itoa(int(uid)) != nobody.Uid {
		t.Errorf("the session directory belongs to uid %d, not nobody's %s", uid, nobody.Uid)
	}
	c, err := d.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	awaitColour(t, c, 10, 10, blue)
}
