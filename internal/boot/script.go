package boot

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Paths of the boot server. A target's files are under TargetPath(mac,
// version): its kernel and initramfs there, named KernelFile and
// InitrdFile.
const (
	// ChainPath is the fixed script that firmware fetches first (QEMU's
	// bootfile=, a DHCP server's filename): it chains to ScriptPath with
	// the MAC of the card that booted.
	ChainPath = "/boot/script.ipxe"
	// ScriptPath is a target's script: ScriptPath?mac=MAC, in any form
	// net.ParseMAC reads (the chain script sends 52-54-00-12-34-56).
	ScriptPath = "/boot/ipxe"
	// FilesPrefix starts a target's files: FilesPrefix + MAC/VERSION/FILE.
	FilesPrefix = "/boot/t/"
	KernelFile  = "kernel"
	InitrdFile  = "initrd"
)

// TargetPath is the directory of a target's files for a version.
func TargetPath(mac string, version int) string {
	return FilesPrefix + PathMAC(mac) + "/" + strconv.Itoa(version) + "/"
}

// FileRequest is a request for a target's kernel or initramfs.
type FileRequest struct {
	MAC     string
	Version int
	Step    Step
}

// ParseFilePath reads a path under FilesPrefix: MAC/VERSION/kernel or
// MAC/VERSION/initrd. It fails with a Refusal for anything else.
func ParseFilePath(p string) (FileRequest, error) {
	rest, ok := strings.CutPrefix(p, FilesPrefix)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		return FileRequest{}, refuse(ErrBadMAC, "the path names no target's file: want %sMAC/VERSION/%s or %s", FilesPrefix, KernelFile, InitrdFile)
	}
	mac, err := ParseMAC(parts[0])
	if err != nil {
		return FileRequest{}, err
	}
	v, err := strconv.Atoi(parts[1])
	if err != nil || v < 0 || v > 1_000_000 || strconv.Itoa(v) != parts[1] {
		return FileRequest{}, refuse(ErrStale, "the path's version is not a version number")
	}
	var step Step
	switch parts[2] {
	case KernelFile:
		step = "kernel"
	case InitrdFile:
		step = "initrd"
	default:
		return FileRequest{}, refuse(ErrStale, "the path names no target's file: want %s or %s", KernelFile, InitrdFile)
	}
	return FileRequest{MAC: mac, Version: v, Step: step}, nil
}

// Stream is where targets reach the NBD stream for their root disk.
type Stream struct {
	Host string
	Port int
}

// ParseStream reads nbd://HOST:PORT (usher serve --boot-stream): the
// address as the targets reach it (in QEMU's user networking the host's
// loopback is 10.0.2.2).
func ParseStream(s string) (Stream, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "nbd" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return Stream{}, fmt.Errorf("boot stream %q: want nbd://HOST:PORT", s)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "10809"
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return Stream{}, fmt.Errorf("boot stream %q: port %q is not 1..65535", s, port)
	}
	if !validHost(host) {
		return Stream{}, fmt.Errorf("boot stream %q: %q is not a host name or an IP address", s, host)
	}
	return Stream{Host: host, Port: p}, nil
}

func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// nbdroot is Debian's nbd-client initramfs syntax for the export:
// HOST:PORT/NAME, or [IPV6]:PORT/NAME.
func (s Stream) nbdroot(export string) string {
	host := s.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(s.Port) + "/" + export
}

// DeviceListen is where a device-side write cache's agent serves the
// root disk on the target: its own loopback (nbdroot=DeviceListen/EXPORT).
const DeviceListen = "127.0.0.1:10809"

// ScriptOptions shape a target's script.
type ScriptOptions struct {
	Stream Stream
	// NoAgent says why the boot server has no device-side agent ("" when
	// it has one): ram and ram-overflow targets are then refused
	// (CheckAgent).
	NoAgent string
	// Append is added to the kernel command line: the console, quiet,
	// what the image needs.
	Append string
}

// CheckAppend checks what the operator appends to every kernel command
// line: printable ASCII, no more than 1024 bytes.
func CheckAppend(s string) error {
	if len(s) > 1024 {
		return fmt.Errorf("kernel arguments longer than 1024 bytes")
	}
	for _, r := range s {
		if r < ' ' || r > '~' {
			return fmt.Errorf("kernel arguments %q hold a character other than printable ASCII", s)
		}
	}
	return nil
}

// KernelArgs is the target's kernel command line: networking by DHCP,
// the root disk over NBD (nbd-client's initramfs support in Debian and
// Ubuntu: nbdroot= and root=/dev/nbd0, reconnecting with -persist), the
// initramfs by name (EFI stubs need it), usher's binding for the
// initramfs (usher.cache, usher.ram, usher.mode), and then Append. A
// device-side cache (Binding.DeviceCache) attaches the root disk
// through the agent on the target's loopback (nbdroot=DeviceListen/
// EXPORT), which reads the stream's export (usher.upstream=HOST:PORT/
// EXPORT); its overflow disk, usher.overflow=DEVICE, comes from Append.
func KernelArgs(b Binding, o ScriptOptions) string {
	root := o.Stream.nbdroot(b.Export())
	if b.DeviceCache() {
		root = DeviceListen + "/" + b.Export()
	}
	args := []string{"initrd=" + InitrdFile, "ip=dhcp", "root=/dev/nbd0", "nbdroot=" + root,
		"usher.image=" + b.Target.Image, "usher.version=" + strconv.Itoa(b.Version), "usher.cache=" + string(b.Target.Cache)}
	if b.DeviceCache() {
		args = append(args, "usher.upstream="+o.Stream.nbdroot(b.Export()))
	}
	if b.Target.Cache != "server-disk" {
		args = append(args, "usher.ram="+strconv.FormatInt(b.Target.RAMBytes(), 10))
	}
	if b.Private {
		args = append(args, "usher.mode=private")
	}
	if o.Append != "" {
		args = append(args, o.Append)
	}
	return strings.Join(args, " ")
}

// Script is a target's iPXE script: its kernel and initramfs, from the
// version its binding resolved to, by paths relative to the boot
// server that served the script.
func Script(b Binding, o ScriptOptions) string {
	dir := TargetPath(b.Target.MAC, b.Version)
	mode := "standard mode"
	if b.Private {
		mode = "private mode"
	}
	var s strings.Builder
	s.WriteString("#!ipxe\n")
	fmt.Fprintf(&s, "# usher: target %s (%s): image %s version %d, %s, cache %s\n",
		comment(b.Target.Name), b.Target.MAC, b.Target.Image, b.Version, mode, b.Target.Cache)
	fmt.Fprintf(&s, "echo usher: booting %s version %d (%s)\n", b.Target.Image, b.Version, mode)
	if b.DeviceCache() {
		fmt.Fprintf(&s, "echo usher: write cache %s on this machine (its initramfs runs usher target)\n", b.Target.Cache)
	}
	fmt.Fprintf(&s, "kernel %s%s %s\n", dir, KernelFile, KernelArgs(b, o))
	fmt.Fprintf(&s, "initrd %s%s\n", dir, InitrdFile)
	s.WriteString("boot\n")
	return s.String()
}

// ChainScript is the fixed script at ChainPath. It asks for the script
// of the card that booted (netX), its MAC hyphenated (iPXE takes the
// first colon of a URI, query included, for the end of a scheme); when
// the boot server refuses (iPXE runs no script that comes with an error
// status), it says so on the console and gives the machine back to its
// firmware.
func ChainScript() string {
	return "#!ipxe\n" +
		"echo usher: asking for the boot script of ${netX/mac}\n" +
		"chain " + ScriptPath + "?mac=${netX/mac:hexhyp} || goto refused\n" +
		":refused\n" +
		"echo usher: the boot server refused ${netX/mac} (not a known target, or its image or version is missing); its log says why\n" +
		"exit 1\n"
}

// RefusalScript is the answer to a refused boot: a script that says why
// and gives the machine back to its firmware. (Sent with an error
// status, which iPXE does not run: ChainScript says it instead; other
// clients and people read it.)
func RefusalScript(reason string) string {
	return "#!ipxe\necho usher: " + echoText(reason) + "\nexit 1\n"
}

// echoText makes text safe to echo in an iPXE script: no line breaks,
// no settings expansion (${...}), no quotes nor operators.
func echoText(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		case strings.ContainsRune(" .,:;-_@/()=+", r):
			return r
		case r == '"' || r == '\'':
			return -1
		}
		return '?'
	}, s)
}

// comment makes text safe in an iPXE comment line.
func comment(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
