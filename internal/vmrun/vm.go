package vmrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Markers are the lines (prefixes) that the workload prints on the serial
// console (see usher-init).
const (
	MarkerBooted     = "USHER-BOOTED"
	MarkerPresent    = "USHER-MARKER present"
	MarkerAbsent     = "USHER-MARKER absent"
	MarkerWrote      = "USHER-WROTE"
	MarkerWriteError = "USHER-WRITE-ERROR"
	MarkerDone       = "USHER-DONE"
)

// HostAddr is the address at which a guest reaches the host's loopback
// (QEMU user networking): servers on 127.0.0.1 serve the guest there.
const HostAddr = "10.0.2.2"

// EnvVMs names the environment variable that bounds the VMs running at
// once on the machine when VMOptions.Slots is 0 (unset: one per CPU).
const EnvVMs = "USHER_BOOT_VMS"

// VMOptions say what a VM boots. Exactly one of Disk, NBDRoot and BootURL
// says where the root comes from.
type VMOptions struct {
	// Name names the VM in errors and logs.
	Name string
	// Image gives the kernel and initramfs of a direct kernel boot.
	Image *BootImage
	// Disk is the root disk, attached as a virtio disk (root=/dev/vda): a
	// raw file, or an NBD URI that QEMU's own NBD client opens
	// (nbd://HOST:PORT/EXPORT, nbd+unix:///EXPORT?socket=PATH).
	Disk string
	// Snapshot sends a file Disk's writes to a temporary overlay that
	// QEMU drops at exit, leaving the file as it was.
	Snapshot bool
	// NBDRoot boots a diskless machine: its initramfs brings up the
	// network (QEMU user networking, DHCP) and attaches the root with
	// Debian's nbd-client (nbdroot=, which reconnects with -persist):
	// "HOST:PORT/EXPORT", where HOST is HostAddr for a server on the
	// host's loopback (GuestAddr). EXPORT must not be empty.
	NBDRoot string
	// BootURL network-boots with QEMU's iPXE ROM, which fetches this URL
	// (an iPXE script, from the DHCP boot file name of QEMU's user
	// networking): http://10.0.2.2:PORT/... reaches the host's loopback.
	// Image and the kernel arguments are then the script's business.
	BootURL string
	// ExtraDisk is a raw file attached as one more virtio disk, after
	// Disk: /dev/vdb beside a Disk, /dev/vda for an NBDRoot or BootURL
	// machine (a device-side cache's local overflow disk). Its writes
	// reach the file.
	ExtraDisk string
	// MAC is the network card's address; "" is QEMU's 52:54:00:12:34:56.
	MAC string
	// WriteMB is how much data the workload writes (usher.write_mb).
	WriteMB int
	// WriteMode is how it writes it (usher.write_mode): WriteLarge
	// (also "") or WriteSmall.
	WriteMode string
	// MemoryMB is the VM's memory; 0 means 512.
	MemoryMB int
	// Append adds kernel arguments.
	Append []string
	// Timeout bounds the VM's life from its start; 0 means 4 minutes.
	Timeout time.Duration
	// Slots is the number of VM slots on the machine, shared by every
	// process that runs VMs at once (a file lock each): StartVM waits for
	// one of the first Slots to be free. 0 means $USHER_BOOT_VMS, else
	// one per CPU.
	Slots int
	// QEMUArgs are added to QEMU's arguments (a bench's QMP socket and
	// -no-shutdown, to read the disk's counters after the guest's end).
	QEMUArgs []string
}

// The workload's write modes (usher.write_mode; see usher-init).
const (
	// WriteLarge writes one file with dd bs=1M, synced at its end.
	WriteLarge = "large"
	// WriteSmall writes as a desktop does: 4 KiB writes at random
	// offsets of 8 files (each block twice on average), an fsync every
	// 32 writes.
	WriteSmall = "small"
)

// KernelArgs returns the kernel command line that runs the workload, for
// a root device (root=/dev/vda, or nbdroot= arguments) and writeMB MiB of
// writes: the serial console, init, and a panic that ends the VM rather
// than hang it. A network-boot script passes the same.
func KernelArgs(root []string, writeMB int) []string {
	args := []string{"console=ttyS0", "panic=1", "quiet", "rw", "init=" + InitPath, "usher.write_mb=" + strconv.Itoa(writeMB),
		// The PC machine's legacy devices, which udev would otherwise
		// probe in the initramfs: the floppy driver alone costs about a
		// second of a boot under software emulation.
		"modprobe.blacklist=floppy,ata_piix,ata_generic,pata_acpi,psmouse,serio_raw,i2c_piix4,pcspkr"}
	return append(args, root...)
}

// NBDRootArgs returns the kernel arguments of a root on NBD through the
// initramfs (Debian's nbd-client hook): server is "HOST:PORT/EXPORT".
func NBDRootArgs(server string) []string {
	return []string{"ip=dhcp", "nbdroot=" + server, "root=/dev/nbd0"}
}

// GuestAddr returns the address at which a guest reaches a server that
// listens on the host's loopback at addr ("127.0.0.1:PORT"): HostAddr
// and the port.
func GuestAddr(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(HostAddr, port)
}

// qemuArgs returns qemu-system-x86_64's arguments for opt.
func qemuArgs(opt VMOptions) ([]string, error) {
	mem := opt.MemoryMB
	if mem == 0 {
		mem = 512
	}
	args := []string{"-nodefaults", "-display", "none", "-serial", "stdio", "-no-reboot",
		"-smp", "1", "-m", strconv.Itoa(mem)}
	args = append(args, opt.QEMUArgs...)
	nic := "virtio-net-pci,netdev=net0"
	if opt.MAC != "" {
		if _, err := net.ParseMAC(opt.MAC); err != nil {
			return nil, fmt.Errorf("vmrun: MAC %q: %w", opt.MAC, err)
		}
		nic += ",mac=" + opt.MAC
	}
	if kvm() {
		args = append(args, "-accel", "kvm", "-accel", "tcg")
	}
	sources := 0
	for _, s := range []string{opt.Disk, opt.NBDRoot, opt.BootURL} {
		if s != "" {
			sources++
		}
	}
	if sources != 1 {
		return nil, errors.New("vmrun: a VM boots from exactly one of Disk, NBDRoot and BootURL")
	}
	extra := func(args []string) []string {
		if opt.ExtraDisk == "" {
			return args
		}
		return append(args, "-drive", "file="+opt.ExtraDisk+",format=raw,if=virtio,werror=report,rerror=report")
	}
	if opt.BootURL != "" {
		return extra(append(args, "-netdev", "user,id=net0,bootfile="+opt.BootURL,
			"-device", nic, "-boot", "n")), nil
	}
	if opt.Image == nil {
		return nil, errors.New("vmrun: a direct kernel boot needs the Image's kernel and initramfs")
	}
	var root []string
	if opt.Disk != "" {
		// Errors (ENOSPC too) go to the guest, rather than pause the VM.
		drive := "file=" + opt.Disk + ",format=raw,if=virtio,werror=report,rerror=report"
		if opt.Snapshot {
			drive += ",snapshot=on"
		}
		args = extra(append(args, "-drive", drive, "-nic", "none"))
		root = []string{"root=/dev/vda"}
	} else {
		// No option ROM: nothing boots from the network card here.
		args = extra(append(args, "-netdev", "user,id=net0", "-device", nic+",romfile="))
		root = NBDRootArgs(opt.NBDRoot)
	}
	switch opt.WriteMode {
	case "", WriteLarge:
	case WriteSmall:
		root = append(root, "usher.write_mode="+WriteSmall)
	default:
		return nil, fmt.Errorf("vmrun: write mode %q is not %s or %s", opt.WriteMode, WriteLarge, WriteSmall)
	}
	cmdline := strings.Join(append(KernelArgs(root, opt.WriteMB), opt.Append...), " ")
	return append(args, "-kernel", opt.Image.Kernel, "-initrd", opt.Image.Initrd, "-append", cmdline), nil
}

// kvm reports whether QEMU may use KVM: /dev/kvm is there and the CPU
// has virtualisation (vmx, svm). A /dev/kvm on a CPU without them (a
// VM whose hypervisor passes none through) opens, and its guests hang
// before their first console line.
func kvm() bool {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			f := strings.Fields(v)
			return slices.Contains(f, "vmx") || slices.Contains(f, "svm")
		}
	}
	return false
}

// VM is a running qemu-system-x86_64 with its serial console.
type VM struct {
	Name string

	cmd     *exec.Cmd
	start   time.Time
	release func() // the VM slot
	stderr  strings.Builder
	done    chan struct{} // closed when QEMU has exited
	exitErr error
	ran     time.Duration // from the start to QEMU's exit

	mu      sync.Mutex
	lines   []line
	changed chan struct{} // closed and replaced at each new line
}

// line is a serial console line and when it came.
type line struct {
	at   time.Duration // since the start
	text string
}

// StartVM starts a VM, once a VM slot is free on the machine (Slots);
// the caller must Kill it or Wait for it. It returns an error wrapping
// ErrUnavailable when QEMU is not installed.
func StartVM(ctx context.Context, opt VMOptions) (*VM, error) {
	qemu, err := lookPath("qemu-system-x86_64")
	if err != nil {
		return nil, unavailable("qemu-system-x86_64 is not installed (Debian: apt-get install qemu-system-x86)")
	}
	args, err := qemuArgs(opt)
	if err != nil {
		return nil, err
	}
	if opt.Timeout == 0 {
		opt.Timeout = 4 * time.Minute
	}
	release, err := vmSlot(ctx, opt.Slots)
	if err != nil {
		return nil, err
	}
	v := &VM{Name: opt.Name, release: release, done: make(chan struct{}), changed: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opt.Timeout)
	v.cmd = exec.CommandContext(ctx, qemu, args...)
	v.cmd.WaitDelay = 5 * time.Second
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no VM outlives its test binary
	v.cmd.Stderr = &v.stderr
	out, err := v.cmd.StdoutPipe()
	if err != nil {
		cancel()
		release()
		return nil, err
	}
	v.start = time.Now()
	if err := v.cmd.Start(); err != nil {
		cancel()
		release()
		return nil, fmt.Errorf("vmrun: start qemu: %w", err)
	}
	go func() {
		v.read(out)
		v.exitErr = v.cmd.Wait()
		v.ran = time.Since(v.start)
		if ctx.Err() == context.DeadlineExceeded {
			v.exitErr = fmt.Errorf("killed after its timeout %v: %w", opt.Timeout, v.exitErr)
		}
		cancel()
		release()
		close(v.done)
		v.mu.Lock()
		close(v.changed)
		v.mu.Unlock()
	}()
	return v, nil
}

// read collects the serial console's lines until QEMU closes it.
func (v *VM) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		text := strings.TrimRight(sc.Text(), "\r")
		v.mu.Lock()
		v.lines = append(v.lines, line{time.Since(v.start), text})
		close(v.changed)
		v.changed = make(chan struct{})
		v.mu.Unlock()
	}
	io.Copy(io.Discard, r)
}

// WaitFor waits for a serial console line that starts with marker and
// returns it. It fails when the VM exits first, or when ctx ends.
func (v *VM) WaitFor(ctx context.Context, marker string) (string, error) {
	for seen := 0; ; {
		v.mu.Lock()
		for ; seen < len(v.lines); seen++ {
			if text := v.lines[seen].text; strings.HasPrefix(text, marker) {
				v.mu.Unlock()
				return text, nil
			}
		}
		changed := v.changed
		v.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return "", fmt.Errorf("VM %s: waiting for %q: %w", v.Name, marker, ctx.Err())
		}
		select {
		case <-v.done:
			if v.find(marker) == "" {
				return "", fmt.Errorf("VM %s exited (%v) before %q", v.Name, v.exitErrOrNil(), marker)
			}
		default:
		}
	}
}

// find returns the first line starting with marker, or "".
func (v *VM) find(marker string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, l := range v.lines {
		if strings.HasPrefix(l.text, marker) {
			return l.text
		}
	}
	return ""
}

// At returns when the first line starting with marker came, since the
// VM's start, and whether it came.
func (v *VM) At(marker string) (time.Duration, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, l := range v.lines {
		if strings.HasPrefix(l.text, marker) {
			return l.at, true
		}
	}
	return 0, false
}

// BootTime returns the time from QEMU's start to the workload's first
// line (MarkerBooted), or 0 before it.
func (v *VM) BootTime() time.Duration {
	d, _ := v.At(MarkerBooted)
	return d
}

// Serial returns the serial console's output so far.
func (v *VM) Serial() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b strings.Builder
	for _, l := range v.lines {
		fmt.Fprintf(&b, "[%7.3f] %s\n", l.at.Seconds(), l.text)
	}
	return b.String()
}

// Wait waits for QEMU to exit and returns its error (nil when the guest
// powered off); a VM past its timeout is killed.
func (v *VM) Wait(ctx context.Context) error {
	select {
	case <-v.done:
		return v.exitErrOrNil()
	case <-ctx.Done():
		return fmt.Errorf("VM %s: %w", v.Name, ctx.Err())
	}
}

func (v *VM) exitErrOrNil() error {
	select {
	case <-v.done:
	default:
		return nil
	}
	if v.exitErr != nil {
		return fmt.Errorf("qemu: %w: %s", v.exitErr, strings.TrimSpace(v.stderr.String()))
	}
	return nil
}

// Exited reports whether QEMU has exited.
func (v *VM) Exited() bool {
	select {
	case <-v.done:
		return true
	default:
		return false
	}
}

// Kill kills QEMU (a pulled plug) and waits for it; on an exited VM it
// does nothing.
func (v *VM) Kill() {
	if !v.Exited() {
		v.cmd.Process.Kill()
	}
	<-v.done
}

// Result is what a boot that ran its workload to the end showed.
type Result struct {
	// BootTime is from QEMU's start to the workload's first line; Total
	// to QEMU's exit.
	BootTime, Total time.Duration
	// BootID is the boot's random id (USHER-BOOTED boot=ID).
	BootID string
	// Marker is the content of the earlier boot's marker file that the
	// workload found ("boot=ID", naming the boot that wrote it), or ""
	// when there was none.
	Marker string
	// Wrote is the workload's USHER-WROTE or USHER-WRITE-ERROR line.
	Wrote string
	// Serial is the serial console's output.
	Serial string
}

// Result waits for the workload's end (MarkerDone) and QEMU's exit, and
// returns what the boot showed.
func (v *VM) Result(ctx context.Context) (Result, error) {
	if _, err := v.WaitFor(ctx, MarkerDone); err != nil {
		return Result{}, err
	}
	if err := v.Wait(ctx); err != nil {
		return Result{}, fmt.Errorf("VM %s: %w", v.Name, err)
	}
	r := Result{BootTime: v.BootTime(), Total: v.ran, Serial: v.Serial()}
	for _, f := range strings.Fields(v.find(MarkerBooted)) {
		if id, ok := strings.CutPrefix(f, "boot="); ok {
			r.BootID = id
		}
	}
	if m := v.find(MarkerPresent); m != "" {
		r.Marker = strings.TrimSpace(strings.TrimPrefix(m, MarkerPresent))
		if r.Marker == "" {
			r.Marker = "(empty)"
		}
	} else if v.find(MarkerAbsent) == "" {
		return r, fmt.Errorf("VM %s: the workload said neither %q nor %q", v.Name, MarkerPresent, MarkerAbsent)
	}
	if r.Wrote = v.find(MarkerWrote); r.Wrote == "" {
		r.Wrote = v.find(MarkerWriteError)
	}
	return r, nil
}

// DefaultSlots is the number of VM slots when VMOptions.Slots is 0:
// $USHER_BOOT_VMS when it is a positive number, else one per CPU.
func DefaultSlots() int {
	if v, err := strconv.Atoi(os.Getenv(EnvVMs)); err == nil && v > 0 {
		return v
	}
	return runtime.NumCPU()
}

// vmSlot takes one of the machine's n VM slots (a file lock in the
// temporary directory, so that test binaries running at once share
// them), waiting for one to free, and returns what releases it.
func vmSlot(ctx context.Context, n int) (func(), error) {
	if n <= 0 {
		n = DefaultSlots()
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for i := range n {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("usher-boottest-vm%d.lock", i)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return nil, fmt.Errorf("vmrun: VM slot: %w", err)
		}
		files = append(files, f)
	}
	for {
		for i, f := range files {
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
				files[i] = nil // kept open: the lock is the open file's
				return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("vmrun: waiting for a VM slot: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
