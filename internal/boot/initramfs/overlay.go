// Package initramfs makes the initramfs overlay that runs a target's
// device-side write cache (ram, ram-overflow) on the target itself, as
// PVS keeps a target's writes in its own RAM and local disk: a newc
// cpio archive, appended to the image's own initramfs (the kernel
// unpacks archives one after the other, later files replacing earlier
// ones), that holds a statically linked usher (the agent) and an
// initramfs-tools script. The script runs in init-premount (udev has
// loaded the network card's driver; the root is not attached yet): it
// brings up the network, starts `usher target` in front of the stream's
// export with the target's RAM budget and overflow disk, listening on
// the target's loopback, and waits until it serves; local-top's nbd
// script (Debian's and Ubuntu's nbd-client hook) then attaches the root
// disk through it. The agent runs as "@usher": a process whose argv[0]
// starts with '@' is one that the root file system depends on, which
// systemd's shutdown leaves running (initramfs-tools' run-init kills
// nothing at the switch to the root file system).
//
// It writes cpio itself (newc needs a header of 13 hexadecimal fields
// per entry; a library would add a dependency for sixty lines) and
// checks that an agent is statically linked (an initramfs has no
// dynamic loader for it). boot/boothttp serves the overlay; tests read
// it back with Read.
package initramfs

import (
	"bytes"
	"debug/elf"
	_ "embed"
	"errors"
	"fmt"
	"strings"
)

// Paths in the overlay. The agent's directory is usher's own, on the
// script's PATH, so that the shell starts it with argv[0] "@usher".
const (
	AgentDir    = "usher"
	AgentName   = "@usher"
	ScriptPath  = "scripts/init-premount/usher"
	OrderPath   = "scripts/init-premount/ORDER"
	ReadyPath   = "/run/usher/target.ready"
	listenToken = "@LISTEN@"
	readyToken  = "@READY@"
)

//go:embed usher-premount
var script string

// order is init-premount's ORDER, which initramfs-tools' init sources
// to run the directory's scripts: usher's first. An image whose
// initramfs has init-premount scripts of its own loses its ORDER to
// this one, so it runs them after usher's, in name order.
const order = `/scripts/init-premount/usher "$@"
[ -e /conf/param.conf ] && . /conf/param.conf
for s in /scripts/init-premount/*; do
	case "${s##*/}" in
	ORDER | usher) continue ;;
	esac
	[ -x "$s" ] || continue
	"$s" "$@"
	[ -e /conf/param.conf ] && . /conf/param.conf
done
`

// Script returns the init-premount script that starts the agent
// listening on listen (HOST:PORT on the target's loopback).
func Script(listen string) string {
	return strings.NewReplacer(listenToken, listen, readyToken, ReadyPath).Replace(script)
}

// Overlay returns the overlay archive: the agent (a statically linked
// usher's bytes) and the script, whose agent listens on listen.
func Overlay(agent []byte, listen string) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(len(agent) + 16<<10)
	w := NewWriter(&b)
	w.Dir(AgentDir, 0o755)
	w.File(AgentDir+"/"+AgentName, 0o755, agent)
	w.Dir("scripts", 0o755)
	w.Dir("scripts/init-premount", 0o755)
	w.File(ScriptPath, 0o755, []byte(Script(listen)))
	w.File(OrderPath, 0o644, []byte(order))
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Pad is the zeros that bring an initramfs of n bytes to a multiple of
// 4, where the kernel looks for an uncompressed archive that follows.
func Pad(n int) int { return pad4(n) }

// ErrNotStatic: the agent needs a dynamic loader (its ELF program
// headers have an interpreter), which no initramfs provides for it.
var ErrNotStatic = errors.New("not statically linked")

// CheckAgent checks that the file at path can be the agent: an x86-64
// ELF executable with no interpreter (statically linked: usher built
// with CGO_ENABLED=0). It returns an error wrapping ErrNotStatic for a
// dynamically linked one.
func CheckAgent(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("boot agent %s: not an ELF executable: %w", path, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || (f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN) {
		return fmt.Errorf("boot agent %s: a %v %v, not an x86-64 executable", path, f.Machine, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("boot agent %s: %w (it needs a dynamic loader; build usher with CGO_ENABLED=0)", path, ErrNotStatic)
		}
	}
	return nil
}
