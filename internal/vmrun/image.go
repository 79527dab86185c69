package vmrun

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The recipe of the boot image. A change to any of it (or to the
// workload) makes a new cache key, so the next run builds a new image.
const (
	suite    = "bookworm"
	variant  = "minbase"
	diskSize = "2G"
	// recipeRevision changes when Build changes what it makes in a way
	// the rest of the recipe does not show.
	recipeRevision = "1"
)

// packages are installed on top of minbase: the kernel (and its
// initramfs, made by initramfs-tools, with Debian's nbd-client hook for
// nbdroot=), and systemd-sysv for a full boot that the workload skips.
var packages = []string{"linux-image-amd64", "systemd-sysv", "nbd-client", "initramfs-tools"}

// InitPath is where the workload lives in the image: the kernel's init=.
const InitPath = "/usr/local/sbin/usher-init"

//go:embed usher-init
var initScript []byte

// BootImage is a built boot image, in the cache directory; its files are
// read-only (boot the disk with VMOptions.Snapshot, or import a copy).
type BootImage struct {
	// Disk is the root file system: a raw ext4 image of the whole disk
	// (no partition table), root=/dev/vda or root=/dev/nbd0.
	Disk string
	// Kernel and Initrd are the image's kernel and initramfs, copied out
	// of its /boot for a direct kernel boot or a network boot.
	Kernel, Initrd string
	// Key is the digest of the recipe that made it.
	Key string
}

// BuildOptions say where Build keeps the image and where it gets Debian.
type BuildOptions struct {
	// CacheDir holds built images; "" means CacheDir().
	CacheDir string
	// Mirror is the Debian archive debootstrap installs from; "" means
	// Mirror().
	Mirror string
	// Logf, when set, gets progress lines while Build works.
	Logf func(format string, args ...any)
}

// EnvCache and EnvMirror name the environment variables that override
// the cache directory and the Debian mirror.
const (
	EnvCache  = "USHER_BOOT_CACHE"
	EnvMirror = "USHER_BOOT_MIRROR"
)

// CacheDir returns the directory that holds built boot images:
// $USHER_BOOT_CACHE, else usher/boot under os.UserCacheDir(), else under
// the temporary directory.
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "usher", "boot")
	}
	return filepath.Join(os.TempDir(), "usher-boot-cache")
}

// Mirror returns the Debian archive to build from: $USHER_BOOT_MIRROR,
// else the first archive of this machine's apt sources that carries the
// suite, else http://deb.debian.org/debian.
func Mirror() string {
	if m := os.Getenv(EnvMirror); m != "" {
		return m
	}
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	for _, f := range append([]string{"/etc/apt/sources.list"}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if m := mirrorIn(string(b), strings.HasSuffix(f, ".sources")); m != "" {
			return m
		}
	}
	return "http://deb.debian.org/debian"
}

// mirrorIn returns the first archive in an apt sources file that serves
// the suite itself (not -security or -updates): one-line "deb URI SUITE
// COMPONENTS" entries, or deb822 stanzas (URIs:, Suites:) when deb822.
func mirrorIn(text string, deb822 bool) string {
	if !deb822 {
		for line := range strings.Lines(text) {
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == "deb" && len(f) >= 3 {
				uri, s := f[1], f[2]
				if strings.HasPrefix(uri, "[") { // deb [options] URI SUITE
					i := slices.IndexFunc(f, func(x string) bool { return strings.HasSuffix(x, "]") })
					if i < 0 || i+2 >= len(f) {
						continue
					}
					uri, s = f[i+1], f[i+2]
				}
				if s == suite {
					return uri
				}
			}
		}
		return ""
	}
	for _, stanza := range strings.Split(text, "\n\n") {
		var uris, suites []string
		deb := false
		for line := range strings.Lines(stanza) {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || strings.HasPrefix(k, "#") {
				continue
			}
			switch strings.ToLower(k) {
			case "types":
				deb = slices.Contains(strings.Fields(v), "deb")
			case "uris":
				uris = strings.Fields(v)
			case "suites":
				suites = strings.Fields(v)
			}
		}
		if deb && len(uris) > 0 && slices.Contains(suites, suite) {
			return uris[0]
		}
	}
	return ""
}

// baseKey is the digest of what makes the base image (debootstrap's
// tree on an ext4 disk); recipeKey adds the workload installed on it.
func baseKey() string {
	h := sha256.New()
	fmt.Fprintf(h, "revision=%s\nsuite=%s\nvariant=%s\npackages=%s\ndisk=%s\n",
		recipeRevision, suite, variant, strings.Join(packages, ","), diskSize)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// recipeKey is the digest of everything that makes the image.
func recipeKey() string {
	h := sha256.New()
	fmt.Fprintf(h, "base=%s\ninit=%s\n", baseKey(), InitPath)
	h.Write(initScript)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Build returns the boot image from opt.CacheDir, making it there first
// when it is missing. The image is made in two layers, each cached: the
// base (debootstrap's tree on an ext4 disk, with the kernel and
// initramfs: minutes, once per machine) and the workload written into a
// copy of the base's disk (seconds), so that a change to the workload
// does not run debootstrap again. Each layer is made under the cache's
// file lock for its key, so that one process makes it while the others
// wait, in a temporary directory renamed into place, so that a build cut
// short leaves nothing that looks built. It returns an error wrapping
// ErrUnavailable when the image is missing and cannot be built here, and
// says so when the mirror cannot be reached.
func Build(ctx context.Context, opt BuildOptions) (*BootImage, error) {
	if opt.CacheDir == "" {
		opt.CacheDir = CacheDir()
	}
	if opt.Logf == nil {
		opt.Logf = func(string, ...any) {}
	}
	key := recipeKey()
	dir := filepath.Join(opt.CacheDir, "usher-boot-"+key)
	img := &BootImage{
		Disk:   filepath.Join(dir, "disk.raw"),
		Kernel: filepath.Join(dir, "vmlinuz"),
		Initrd: filepath.Join(dir, "initrd.img"),
		Key:    key,
	}
	if _, err := os.Stat(dir); err == nil {
		return img, nil
	}
	base := filepath.Join(opt.CacheDir, "debian-"+suite+"-"+baseKey())
	err := layer(ctx, opt, base, buildable, func(tmp string) error {
		if opt.Mirror == "" {
			opt.Mirror = Mirror()
		}
		if err := reachable(ctx, opt.Mirror); err != nil {
			return err
		}
		opt.Logf("vmrun: building the base image %s in %s from %s (a few minutes, once per machine)", baseKey(), opt.CacheDir, opt.Mirror)
		return buildBase(ctx, tmp, opt)
	})
	if err != nil {
		return nil, err
	}
	err = layer(ctx, opt, dir, installable, func(tmp string) error {
		return installWorkload(ctx, base, tmp)
	})
	if err != nil {
		return nil, err
	}
	return img, nil
}

// layer makes the cache directory dir with make, unless it is there: in
// a temporary directory, under dir's file lock, renamed into place. It
// fails with check's error when check says that it cannot be made here.
func layer(ctx context.Context, opt BuildOptions, dir string, check func() error, make func(tmp string) error) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := check(); err != nil {
		return err
	}
	if err := os.MkdirAll(opt.CacheDir, 0o755); err != nil {
		return fmt.Errorf("vmrun: cache: %w", err)
	}
	name := filepath.Base(dir)
	unlock, err := lock(ctx, dir+".lock", opt.Logf)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(dir); err == nil {
		return nil // another process made it while we waited
	}
	// Left by a build that was cut short: we hold the lock, it is dead.
	stale, _ := filepath.Glob(filepath.Join(opt.CacheDir, ".build-"+name+"-*"))
	for _, s := range stale {
		removeTree(s)
	}
	tmp := filepath.Join(opt.CacheDir, ".build-"+name+"-"+rand.Text()[:8])
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("vmrun: %w", err)
	}
	defer removeTree(tmp)
	start := time.Now()
	if err := make(tmp); err != nil {
		return fmt.Errorf("vmrun: make %s: %w", name, err)
	}
	// Nobody writes the cached image: boots take a snapshot or a copy.
	for _, f := range []string{"disk.raw", "vmlinuz", "initrd.img"} {
		if err := os.Chmod(filepath.Join(tmp, f), 0o444); err != nil {
			return fmt.Errorf("vmrun: make %s: %w", name, err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("vmrun: %w", err)
	}
	opt.Logf("vmrun: %s made in %v", dir, time.Since(start).Round(time.Millisecond))
	return nil
}

// buildable returns nil when this machine can build the image, else an
// error wrapping ErrUnavailable that says why not.
func buildable() error {
	for _, t := range []struct{ tool, pkg string }{{"debootstrap", "debootstrap"}, {"mkfs.ext4", "e2fsprogs"}} {
		if _, err := lookPath(t.tool); err != nil {
			return unavailable("%s is not installed (Debian: apt-get install %s)", t.tool, t.pkg)
		}
	}
	if os.Geteuid() != 0 {
		return unavailable("building the boot image needs root (debootstrap); or point %s at a cache that holds usher-boot-%s", EnvCache, recipeKey())
	}
	return nil
}

// installable returns nil when this machine can install the workload
// into a copy of the base image, else an error wrapping ErrUnavailable.
func installable() error {
	if _, err := lookPath("debugfs"); err != nil {
		return unavailable("debugfs is not installed (Debian: apt-get install e2fsprogs)")
	}
	return nil
}

// lookPath finds a program on PATH or in the sbin directories that a
// non-root PATH lacks.
func lookPath(tool string) (string, error) {
	if p, err := exec.LookPath(tool); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(d, tool)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// reachable checks that mirror serves the suite, so that a machine
// without it gets one clear error rather than debootstrap's.
func reachable(ctx context.Context, mirror string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	url := strings.TrimSuffix(mirror, "/") + "/dists/" + suite + "/Release"
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return fmt.Errorf("vmrun: Debian mirror %q: %w", mirror, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
	}
	if err != nil {
		return fmt.Errorf("vmrun: the Debian mirror %s is unreachable, so the boot image cannot be built (%v); set %s to a reachable one", mirror, err, EnvMirror)
	}
	return nil
}

// lock takes the exclusive file lock at path, waiting for whoever holds
// it (saying so), and returns what releases it.
func lock(ctx context.Context, path string, logf func(string, ...any)) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vmrun: lock: %w", err)
	}
	for waited := time.Duration(0); ; waited += 250 * time.Millisecond {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("vmrun: lock %s: %w", path, err)
		}
		if waited%(30*time.Second) == 0 {
			logf("vmrun: waiting for another process that builds the boot image (%s)", path)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("vmrun: lock %s: %w", path, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// buildBase makes the base image in dir: debootstrap into dir/root, the
// kernel and initramfs copied out, the tree made into an ext4 disk, the
// tree removed.
func buildBase(ctx context.Context, dir string, opt BuildOptions) error {
	root := filepath.Join(dir, "root")
	args := []string{"--variant=" + variant, "--include=" + strings.Join(packages, ","), suite, root, opt.Mirror}
	if err := runLogged(ctx, filepath.Join(dir, "debootstrap.log"), opt.Logf, "debootstrap", args...); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("usher-boottest\n"), 0o644); err != nil {
		return err
	}
	for _, f := range []struct{ glob, to string }{{"vmlinuz-*", "vmlinuz"}, {"initrd.img-*", "initrd.img"}} {
		m, _ := filepath.Glob(filepath.Join(root, "boot", f.glob))
		if len(m) != 1 {
			return fmt.Errorf("the image's /boot has %d %s, want one", len(m), f.glob)
		}
		if err := copyFile(m[0], filepath.Join(dir, f.to)); err != nil {
			return err
		}
	}
	disk := filepath.Join(dir, "disk.raw")
	opt.Logf("vmrun: making the %s ext4 disk", diskSize)
	mkfs, _ := lookPath("mkfs.ext4")
	if out, err := exec.CommandContext(ctx, mkfs, "-q", "-L", "usher-root", "-d", root, disk, diskSize).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %v\n%s", err, out)
	}
	if err := removeTree(root); err != nil {
		return err
	}
	recipe := fmt.Sprintf("base %s\nsuite %s (%s) with %s\nmirror %s\ndisk %s ext4\nbuilt %s\n",
		baseKey(), suite, variant, strings.Join(packages, " "), opt.Mirror, diskSize, time.Now().UTC().Format(time.RFC3339))
	return os.WriteFile(filepath.Join(dir, "recipe.txt"), []byte(recipe), 0o644)
}

// installWorkload makes the image in dir from the base image in base: a
// copy of its disk with the workload written in as InitPath (with
// debugfs, which needs no mount), its kernel and initramfs.
func installWorkload(ctx context.Context, base, dir string) error {
	disk := filepath.Join(dir, "disk.raw")
	if err := copySparse(filepath.Join(base, "disk.raw"), disk); err != nil {
		return err
	}
	for _, f := range []string{"vmlinuz", "initrd.img"} {
		if err := copyFile(filepath.Join(base, f), filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	script := filepath.Join(dir, "usher-init")
	if err := os.WriteFile(script, initScript, 0o755); err != nil {
		return err
	}
	// debugfs goes on past a failed command (rm of a missing file, mkdir
	// of one that is there) and says so on stderr; what matters is
	// checked below, by reading the file back.
	cmds := fmt.Sprintf("mkdir %[1]s\nrm %[1]s/%[2]s\nwrite %[3]s %[1]s/%[2]s\nsif %[1]s/%[2]s mode 0100755\nsif %[1]s/%[2]s uid 0\nsif %[1]s/%[2]s gid 0\n",
		filepath.Dir(InitPath), filepath.Base(InitPath), script)
	debugfs, _ := lookPath("debugfs")
	cmd := exec.CommandContext(ctx, debugfs, "-w", "-f", "-", disk)
	cmd.Stdin = strings.NewReader(cmds)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("debugfs: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, debugfs, "-R", "cat "+InitPath, disk).Output()
	if err != nil || !bytes.Equal(out, initScript) {
		return fmt.Errorf("debugfs did not write %s into the disk (%v)", InitPath, err)
	}
	recipe := fmt.Sprintf("key %s\nbase %s\ninit %s\n", recipeKey(), filepath.Base(base), InitPath)
	return os.WriteFile(filepath.Join(dir, "recipe.txt"), []byte(recipe), 0o644)
}

// copySparse copies a disk image, leaving its zero blocks holes.
func copySparse(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	zero := make([]byte, len(buf))
	for off := int64(0); off < fi.Size(); off += int64(len(buf)) {
		n, err := io.ReadFull(src, buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			dst.Close()
			return err
		}
		if !bytes.Equal(buf[:n], zero[:n]) {
			if _, err := dst.WriteAt(buf[:n], off); err != nil {
				dst.Close()
				return err
			}
		}
	}
	if err := dst.Truncate(fi.Size()); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// runLogged runs a long command with its output in logPath, passing a
// progress line (its latest output line) to logf every 20 seconds. Its
// error ends with the output's last lines.
func runLogged(ctx context.Context, logPath string, logf func(string, ...any), name string, args ...string) error {
	path, err := lookPath(name)
	if err != nil {
		return unavailable("%s is not installed", name)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A test binary killed at its timeout takes debootstrap with it,
	// rather than leave it building for nobody.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	logf("vmrun: %s %s", name, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%s: %v; the end of its output (%s):\n%s", name, err, logPath, tail(logPath, 20))
			}
			logf("vmrun: %s done in %v", name, time.Since(start).Round(time.Second))
			return nil
		case <-tick.C:
			logf("vmrun: %s, %v: %s", name, time.Since(start).Round(time.Second), tail(logPath, 1))
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// removeTree removes a directory that may hold a debootstrap tree, first
// unmounting what a debootstrap cut short left mounted in it (its /proc,
// /sys), so that the removal never reaches into the host's.
func removeTree(dir string) error {
	if b, err := os.ReadFile("/proc/self/mounts"); err == nil {
		var under []string
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
				under = append(under, f[1])
			}
		}
		slices.Reverse(under) // the deepest first
		for _, m := range under {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount %s: %w", m, err)
			}
		}
	}
	return os.RemoveAll(dir)
}
