package initramfs

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestOverlayReadsBack(t *testing.T) {
	agent := bytes.Repeat([]byte{0x7f, 'E', 'L', 'F', 1}, 1001) // not a multiple of 4
	o, err := Overlay(agent, "127.0.0.1:10809")
	if err != nil {
		t.Fatal(err)
	}
	if len(o)%4 != 0 {
		t.Errorf("the overlay is %d bytes, not a multiple of 4", len(o))
	}
	entries, n, err := Read(o)
	if err != nil || n != len(o) {
		t.Fatalf("Read: %v, %d of %d bytes", err, n, len(o))
	}
	want := map[string]uint32{AgentDir: ModeDir | 0o755, AgentDir + "/" + AgentName: ModeFile | 0o755,
		"scripts": ModeDir | 0o755, "scripts/init-premount": ModeDir | 0o755, ScriptPath: ModeFile | 0o755, OrderPath: ModeFile | 0o644}
	files := map[string][]byte{}
	for _, e := range entries {
		if m, ok := want[e.Name]; !ok || m != e.Mode {
			t.Errorf("entry %q mode %o; want %o", e.Name, e.Mode, m)
		}
		files[e.Name] = e.Data
	}
	if len(entries) != len(want) {
		t.Errorf("%d entries, want %d", len(entries), len(want))
	}
	if !bytes.Equal(files[AgentDir+"/"+AgentName], agent) {
		t.Error("the agent does not read back")
	}
	script := string(files[ScriptPath])
	for _, s := range []string{"--listen 127.0.0.1:10809", "--ready " + ReadyPath, "PATH=/" + AgentDir + ":$PATH " + AgentName + " \"$@\""} {
		if !strings.Contains(script, s) {
			t.Errorf("the script lacks %q", s)
		}
	}
	if strings.Contains(script, "@LISTEN@") || strings.Contains(script, "@READY@") {
		t.Error("the script keeps a placeholder")
	}
	if !strings.HasPrefix(string(files[OrderPath]), "/"+ScriptPath+` "$@"`) {
		t.Errorf("ORDER does not run the script first:\n%s", files[OrderPath])
	}

	// Appended to an initramfs of any length, after Pad's zeros, the
	// overlay starts where the kernel looks for an archive.
	initrd := []byte("compressed initramfs, 41 bytes long......")
	cat := append(append(append([]byte{}, initrd...), make([]byte, Pad(len(initrd)))...), o...)
	if start := len(cat) - len(o); start%4 != 0 {
		t.Errorf("the overlay starts at %d", start)
	}
}

func TestReadRejects(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	w.File("a", 0o644, []byte("hello"))
	w.Close()
	good := b.Bytes()
	for name, in := range map[string][]byte{
		"empty":      nil,
		"bad magic":  append([]byte("070707"), good[6:]...),
		"no trailer": good[:len(good)-120],
		"bad field":  append(append(append([]byte{}, good[:6]...), []byte("zzzzzzzz")...), good[14:]...),
		"truncated":  good[:115],
	} {
		if _, _, err := Read(in); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
	if _, err := Overlay(nil, "x"); err != nil {
		t.Errorf("an empty agent: %v", err)
	}
	w = NewWriter(&b)
	if err := w.File("", 0o644, nil); err == nil {
		t.Error("an empty name is written")
	}
}

func TestCheckAgent(t *testing.T) {
	dir := t.TempDir()
	notELF := dir + "/script"
	os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)
	if err := CheckAgent(notELF); err == nil {
		t.Error("a shell script is an agent")
	}
	for _, dynamic := range []string{"/bin/sh", "/usr/bin/env"} {
		if _, err := os.Stat(dynamic); err != nil {
			continue
		}
		if err := CheckAgent(dynamic); !errors.Is(err, ErrNotStatic) {
			t.Errorf("%s: %v, want ErrNotStatic", dynamic, err)
		}
		return
	}
}

func FuzzRead(f *testing.F) {
	var b bytes.Buffer
	w := NewWriter(&b)
	w.Dir("d", 0o755)
	w.File("d/f", 0o600, []byte("data"))
	w.Close()
	f.Add(b.Bytes())
	f.Add([]byte("070701"))
	f.Fuzz(func(t *testing.T, in []byte) {
		entries, n, err := Read(in)
		if err != nil {
			return
		}
		if n > len(in) {
			t.Fatalf("length %d past the input's %d", n, len(in))
		}
		// What reads back writes back to the same entries.
		var out bytes.Buffer
		w := NewWriter(&out)
		for _, e := range entries {
			if err := w.entry(e.Name, e.Mode, e.Data); err != nil {
				return // a name Writer refuses (a NUL inside)
			}
		}
		w.Close()
		again, _, err := Read(out.Bytes())
		if err != nil || len(again) != len(entries) {
			t.Fatalf("rewritten: %v, %d entries of %d", err, len(again), len(entries))
		}
		for i := range again {
			if again[i].Name != entries[i].Name || again[i].Mode != entries[i].Mode || !bytes.Equal(again[i].Data, entries[i].Data) {
				t.Fatalf("entry %d differs", i)
			}
		}
	})
}
