package vmrun

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMirrorIn(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		deb822     bool
		want       string
	}{
		{"one-line", "# comment\ndeb http://deb.debian.org/debian-security bookworm-security main\ndeb http://mirror.example/debian bookworm main contrib\n", false, "http://mirror.example/debian"},
		{"one-line with options", "deb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\n", false, "http://m.example/debian"},
		{"one-line, another suite", "deb http://m.example/debian trixie main\ndeb-src http://m.example/debian bookworm main\n", false, ""},
		{"deb822", "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n", true, "http://deb.debian.org/debian"},
		{"deb822, sources only", "Types: deb-src\nURIs: http://m.example/debian\nSuites: bookworm\n", true, ""},
		{"deb822, another archive first", "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\n\nTypes: deb\nURIs: http://m.example/debian\nSuites: bookworm\n", true, "http://m.example/debian"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mirrorIn(tc.text, tc.deb822); got != tc.want {
				t.Fatalf("mirrorIn = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestQemuArgs(t *testing.T) {
	img := &BootImage{Kernel: "/c/vmlinuz", Initrd: "/c/initrd.img", Disk: "/c/disk.raw"}
	for _, tc := range []struct {
		name string
		opt  VMOptions
		want []string // in order, among the arguments
		err  string
	}{
		{"file", VMOptions{Image: img, Disk: img.Disk, Snapshot: true, WriteMB: 8},
			[]string{"-drive", "file=/c/disk.raw,format=raw,if=virtio,werror=report,rerror=report,snapshot=on", "-nic", "none", "-kernel", "/c/vmlinuz", "-initrd", "/c/initrd.img",
				"-append", "console=ttyS0 panic=1 quiet rw init=/usr/local/sbin/usher-init usher.write_mb=8 modprobe.blacklist=floppy,ata_piix,ata_generic,pata_acpi,psmouse,serio_raw,i2c_piix4,pcspkr root=/dev/vda"}, ""},
		{"nbd", VMOptions{Image: img, Disk: "nbd://127.0.0.1:1/golden@1", MemoryMB: 256},
			[]string{"-m", "256", "-drive", "file=nbd://127.0.0.1:1/golden@1,format=raw,if=virtio,werror=report,rerror=report"}, ""},
		{"nbdroot", VMOptions{Image: img, NBDRoot: "10.0.2.2:10809/golden"},
			[]string{"-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0,romfile=", "-kernel", "/c/vmlinuz", "-initrd", "/c/initrd.img", "-append", "console=ttyS0 panic=1 quiet rw init=/usr/local/sbin/usher-init usher.write_mb=0 modprobe.blacklist=floppy,ata_piix,ata_generic,pata_acpi,psmouse,serio_raw,i2c_piix4,pcspkr ip=dhcp nbdroot=10.0.2.2:10809/golden root=/dev/nbd0"}, ""},
		{"network boot", VMOptions{BootURL: "http://10.0.2.2:8080/boot.ipxe"},
			[]string{"-netdev", "user,id=net0,bootfile=http://10.0.2.2:8080/boot.ipxe", "-device", "virtio-net-pci,netdev=net0", "-boot", "n"}, ""},
		{"extra disk and MAC", VMOptions{BootURL: "http://10.0.2.2:8080/boot.ipxe", ExtraDisk: "/c/local.raw", MAC: "52:54:00:00:02:01"},
			[]string{"-device", "virtio-net-pci,netdev=net0,mac=52:54:00:00:02:01", "-boot", "n",
				"-drive", "file=/c/local.raw,format=raw,if=virtio,werror=report,rerror=report"}, ""},
		{"extra disk beside the root", VMOptions{Image: img, Disk: img.Disk, ExtraDisk: "/c/local.raw"},
			[]string{"-drive", "file=/c/disk.raw,format=raw,if=virtio,werror=report,rerror=report", "-nic", "none",
				"-drive", "file=/c/local.raw,format=raw,if=virtio,werror=report,rerror=report"}, ""},
		{"small writes", VMOptions{Image: img, Disk: img.Disk, WriteMB: 8, WriteMode: WriteSmall},
			[]string{"-append", "console=ttyS0 panic=1 quiet rw init=/usr/local/sbin/usher-init usher.write_mb=8 modprobe.blacklist=floppy,ata_piix,ata_generic,pata_acpi,psmouse,serio_raw,i2c_piix4,pcspkr root=/dev/vda usher.write_mode=small"}, ""},
		{"bad write mode", VMOptions{Image: img, Disk: img.Disk, WriteMode: "huge"}, nil, "write mode"},
		{"bad MAC", VMOptions{BootURL: "http://x/", MAC: "52:54"}, nil, "MAC"},
		{"two roots", VMOptions{Image: img, Disk: img.Disk, NBDRoot: "10.0.2.2:10809/golden"}, nil, "exactly one"},
		{"no root", VMOptions{Image: img}, nil, "exactly one"},
		{"no kernel", VMOptions{Disk: img.Disk}, nil, "kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, err := qemuArgs(tc.opt)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("qemuArgs: %v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			i := slices.Index(args, tc.want[0])
			if i < 0 || i+len(tc.want) > len(args) || !slices.Equal(args[i:i+len(tc.want)], tc.want) {
				t.Fatalf("qemuArgs:\n%q\nwant among them\n%q", args, tc.want)
			}
		})
	}
}

// TestVMSlots: a VM slot is a file lock that the next taker waits for,
// n slots let n VMs run at once, a released slot is taken again, and
// DefaultSlots reads $USHER_BOOT_VMS.
func TestVMSlots(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // the slots' lock files: this test's alone
	ctx := context.Background()
	release, err := vmSlot(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if r, err := vmSlot(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		if r != nil {
			r()
		}
		t.Fatalf("a second VM in one slot: %v, want it to wait until its context ends", err)
	}
	second, err := vmSlot(ctx, 2)
	if err != nil {
		t.Fatalf("a second VM in two slots: %v", err)
	}
	second()
	release()
	again, err := vmSlot(ctx, 1)
	if err != nil {
		t.Fatalf("the released slot: %v", err)
	}
	again()

	t.Setenv(EnvVMs, "3")
	if got := DefaultSlots(); got != 3 {
		t.Errorf("DefaultSlots with %s=3: %d", EnvVMs, got)
	}
	t.Setenv(EnvVMs, "")
	if got, want := DefaultSlots(), runtime.NumCPU(); got != want {
		t.Errorf("DefaultSlots without %s: %d, want one per CPU (%d)", EnvVMs, got, want)
	}
}
