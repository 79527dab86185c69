package boot_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/boot"
	"github.com/usher-vdi/usher/internal/site"
)

func pin(n int) *int { return &n }

var kiosk = boot.Image{Name: "kiosk", Production: 2, Versions: []boot.Version{{Number: 0}, {Number: 1}, {Number: 2}, {Number: 3, Maintenance: true}}}

func TestParseMAC(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"52:54:00:12:34:56", "52:54:00:12:34:56"},
		{"52:54:00:AB:CD:EF", "52:54:00:ab:cd:ef"},
		{"52-54-00-ab-cd-ef", "52:54:00:ab:cd:ef"},
		{"5254.00ab.cdef", "52:54:00:ab:cd:ef"},
		{"", ""},
		{"52:54:00:12:34", ""},
		{"52:54:00:12:34:56:78:9a", ""}, // EUI-64
		{"52:54:00:12:34:5g", ""},
		{"${net0/mac}", ""},
		{strings.Repeat("52:", 100), ""},
	} {
		got, err := boot.ParseMAC(tc.in)
		if tc.want == "" {
			if !errors.Is(err, boot.ErrBadMAC) {
				t.Errorf("ParseMAC(%q) = %q, %v; want ErrBadMAC", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseMAC(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		target  site.Target
		image   boot.Image
		found   bool
		version int
		private bool
		err     error
		says    string
	}{
		{"production", site.Target{Name: "k1", Image: "kiosk"}, kiosk, true, 2, false, nil, ""},
		{"pinned", site.Target{Name: "k1", Image: "kiosk", Version: pin(0)}, kiosk, true, 0, false, nil, ""},
		{"maintenance is private", site.Target{Name: "k1", Image: "kiosk", Version: pin(3)}, kiosk, true, 3, true, nil, ""},
		{"missing image", site.Target{Name: "k1", Image: "gone"}, boot.Image{}, false, 0, false, boot.ErrNoImage, `image "gone" is not in the image store`},
		{"missing version", site.Target{Name: "k1", Image: "kiosk", Version: pin(9)}, kiosk, true, 0, false, boot.ErrNoVersion, `image "kiosk" has no version 9`},
		{"no production", site.Target{Name: "k1", Image: "kiosk"}, boot.Image{Name: "kiosk", Production: -1, Versions: []boot.Version{{Number: 0, Maintenance: true}}}, true, 0, false, boot.ErrNoVersion, "no production version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := boot.Resolve(tc.target, tc.image, tc.found)
			if tc.err != nil {
				var r *boot.Refusal
				if !errors.Is(err, tc.err) || !errors.As(err, &r) || !strings.Contains(r.Reason, tc.says) || !strings.Contains(r.Reason, "k1") {
					t.Fatalf("Resolve = %v, want a refusal wrapping %v that says %q and names the target", err, tc.err, tc.says)
				}
				return
			}
			if err != nil || b.Version != tc.version || b.Private != tc.private {
				t.Fatalf("Resolve = %+v, %v; want version %d private %v", b, err, tc.version, tc.private)
			}
			if err := boot.CheckVersion(b, tc.version); err != nil {
				t.Errorf("CheckVersion of the version resolved: %v", err)
			}
			if err := boot.CheckVersion(b, tc.version+1); !errors.Is(err, boot.ErrStale) {
				t.Errorf("CheckVersion of another version: %v, want ErrStale", err)
			}
		})
	}
}

func TestScript(t *testing.T) {
	stream, err := boot.ParseStream("nbd://10.0.2.2:10809")
	if err != nil {
		t.Fatal(err)
	}
	opts := boot.ScriptOptions{Stream: stream, Append: "console=ttyS0,115200n8"}
	b := boot.Binding{Target: site.Target{Name: "kiosk-01", MAC: "52:54:00:00:01:01", Image: "kiosk", Cache: site.CacheServerDisk}, Version: 2}
	want := "#!ipxe\n" +
		"# usher: target kiosk-01 (52:54:00:00:01:01): image kiosk version 2, standard mode, cache server-disk\n" +
		"echo usher: booting kiosk version 2 (standard mode)\n" +
		"kernel /boot/t/52-54-00-00-01-01/2/kernel initrd=initrd ip=dhcp root=/dev/nbd0 nbdroot=10.0.2.2:10809/kiosk@2 " +
		"usher.image=kiosk usher.version=2 usher.cache=server-disk console=ttyS0,115200n8\n" +
		"initrd /boot/t/52-54-00-00-01-01/2/initrd\n" +
		"boot\n"
	if got := boot.Script(b, opts); got != want {
		t.Errorf("server-disk script:\n%s\nwant:\n%s", got, want)
	}

	b = boot.Binding{Target: site.Target{Name: "kiosk-02", MAC: "52:54:00:00:01:02", Image: "kiosk", Cache: site.CacheRAMOverflow, RAM: "256MiB"}, Version: 3, Private: true}
	got := boot.KernelArgs(b, boot.ScriptOptions{Stream: boot.Stream{Host: "fd00::1", Port: 10900}})
	for _, part := range []string{"nbdroot=[fd00::1]:10900/kiosk@3", "usher.cache=ram-overflow", "usher.ram=268435456", "usher.mode=private"} {
		if !strings.Contains(got, part) {
			t.Errorf("kernel args %q lack %q", got, part)
		}
	}
	if strings.Contains(got, "usher.upstream=") {
		t.Errorf("a private-mode boot's kernel args %q name an agent's upstream: it writes to the version", got)
	}
}

// TestDeviceCache: a ram or ram-overflow target in standard mode
// attaches its root disk through the agent on its loopback, which reads
// the stream's export; without an agent, it is refused.
func TestDeviceCache(t *testing.T) {
	stream := boot.Stream{Host: "10.0.2.2", Port: 10809}
	for _, mode := range []site.CacheMode{site.CacheRAM, site.CacheRAMOverflow} {
		b := boot.Binding{Target: site.Target{Name: "pc-01", MAC: "52:54:00:00:01:03", Image: "desk", Cache: mode, RAM: "64MiB"}, Version: 4}
		if !b.DeviceCache() {
			t.Fatalf("%s: not a device cache", mode)
		}
		got := boot.KernelArgs(b, boot.ScriptOptions{Stream: stream, Append: "usher.overflow=/dev/sda"})
		for _, part := range []string{"nbdroot=" + boot.DeviceListen + "/desk@4 ", "usher.upstream=10.0.2.2:10809/desk@4 ",
			"usher.cache=" + string(mode) + " ", "usher.ram=67108864 ", "usher.overflow=/dev/sda"} {
			if !strings.Contains(got+" ", part) {
				t.Errorf("%s: kernel args %q lack %q", mode, got, part)
			}
		}
		if err := boot.CheckAgent(b, ""); err != nil {
			t.Errorf("%s with an agent: %v", mode, err)
		}
		err := boot.CheckAgent(b, "usher serve was started with --boot-agent none")
		var r *boot.Refusal
		if !errors.As(err, &r) || !errors.Is(err, boot.ErrNoAgent) || !strings.Contains(r.Reason, "--boot-agent none") ||
			!strings.Contains(r.Reason, "target pc-01: cache "+string(mode)) {
			t.Errorf("%s without an agent: %v", mode, err)
		}
		if s := boot.Script(b, boot.ScriptOptions{Stream: stream}); !strings.Contains(s, "echo usher: write cache "+string(mode)+" on this machine") {
			t.Errorf("%s: the script does not say where the cache is:\n%s", mode, s)
		}
	}
	for _, b := range []boot.Binding{
		{Target: site.Target{Name: "a", Cache: site.CacheServerDisk}},
		{Target: site.Target{Name: "b", Cache: site.CacheRAM}, Private: true},
	} {
		if b.DeviceCache() || boot.CheckAgent(b, "none") != nil {
			t.Errorf("%+v: a device cache", b)
		}
	}
}

func TestRefusalScriptEscapes(t *testing.T) {
	got := boot.RefusalScript("target x: image \"a\" ${evil}\nchain http://attacker/ || shell")
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 3 || lines[0] != "#!ipxe" || lines[2] != "exit 1" || !strings.HasPrefix(lines[1], "echo usher: ") {
		t.Fatalf("refusal script:\n%s", got)
	}
	if strings.ContainsAny(lines[1], "${}\"|") {
		t.Errorf("refusal echo %q keeps a character iPXE interprets", lines[1])
	}
	if !strings.Contains(boot.ChainScript(), "chain /boot/ipxe?mac=${netX/mac:hexhyp} || goto refused") {
		t.Errorf("chain script:\n%s", boot.ChainScript())
	}
}

func TestParseStream(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want boot.Stream
		ok   bool
	}{
		{"nbd://10.0.2.2:10809", boot.Stream{Host: "10.0.2.2", Port: 10809}, true},
		{"nbd://stream.example.com", boot.Stream{Host: "stream.example.com", Port: 10809}, true},
		{"nbd://[fd00::1]:9", boot.Stream{Host: "fd00::1", Port: 9}, true},
		{"http://10.0.2.2:10809", boot.Stream{}, false},
		{"nbd://10.0.2.2:10809/win11", boot.Stream{}, false},
		{"nbd://a b:1", boot.Stream{}, false},
		{"nbd://h:99999", boot.Stream{}, false},
		{"nbd://", boot.Stream{}, false},
	} {
		got, err := boot.ParseStream(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseStream(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

func TestParseFilePath(t *testing.T) {
	got, err := boot.ParseFilePath("/boot/t/52-54-00-00-01-01/2/initrd")
	if err != nil || got != (boot.FileRequest{MAC: "52:54:00:00:01:01", Version: 2, Step: site.BootInitrd}) {
		t.Fatalf("ParseFilePath = %+v, %v", got, err)
	}
	for _, p := range []string{
		"/boot/t/52-54-00-00-01-01/2/vmlinuz",
		"/boot/t/52-54-00-00-01-01/02/kernel",
		"/boot/t/52-54-00-00-01-01/-1/kernel",
		"/boot/t/52-54-00-00-01-01/kernel",
		"/boot/t/nope/2/kernel",
		"/boot/t/52-54-00-00-01-01/2/kernel/x",
		"/boot/t/../../etc/passwd",
	} {
		if _, err := boot.ParseFilePath(p); err == nil {
			t.Errorf("ParseFilePath(%q) accepted", p)
		}
	}
}

func FuzzParseMAC(f *testing.F) {
	for _, s := range []string{"52:54:00:12:34:56", "52-54-00-AB-CD-EF", "5254.00ab.cdef", "", "::::::", "${net0/mac}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mac, err := boot.ParseMAC(s)
		if err != nil {
			return
		}
		again, err := boot.ParseMAC(mac)
		if err != nil || again != mac || len(mac) != 17 || mac != strings.ToLower(mac) {
			t.Fatalf("ParseMAC(%q) = %q, which parses as %q, %v", s, mac, again, err)
		}
		if norm, err := site.NormalizeMAC(s); err != nil || norm != mac {
			t.Fatalf("site.NormalizeMAC(%q) = %q, %v; boot.ParseMAC %q", s, norm, err, mac)
		}
	})
}

func FuzzParseFilePath(f *testing.F) {
	for _, s := range []string{"/boot/t/52-54-00-00-01-01/2/kernel", "/boot/t/x/y/z", "/boot/t/", "/boot/t/52:54:00:00:01:01/0/initrd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		r, err := boot.ParseFilePath(p)
		if err != nil {
			return
		}
		if (r.Step != site.BootKernel && r.Step != site.BootInitrd) || r.Version < 0 || len(r.MAC) != 17 {
			t.Fatalf("ParseFilePath(%q) = %+v", p, r)
		}
		if _, err := boot.ParseFilePath(boot.TargetPath(r.MAC, r.Version) + string(r.Step)); err != nil {
			t.Fatalf("the path of %+v does not parse: %v", r, err)
		}
	})
}

func FuzzRefusalScript(f *testing.F) {
	f.Add("target x: image \"a\" is not in the image store")
	f.Fuzz(func(t *testing.T, reason string) {
		s := boot.RefusalScript(reason)
		if strings.Count(s, "\n") != 3 || strings.ContainsAny(strings.Split(s, "\n")[1], "${}\"'|&#\r") {
			t.Fatalf("RefusalScript(%q) = %q", reason, s)
		}
	})
}
