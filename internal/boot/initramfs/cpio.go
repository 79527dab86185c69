package initramfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The newc ("new ASCII") cpio format, the one the Linux kernel unpacks
// into its initramfs: each entry is a 110-byte header of a magic and 13
// eight-digit hexadecimal fields, the name with its NUL, padding to a
// multiple of 4 bytes, the data, padding again; a last entry named
// trailerName ends the archive.
const (
	newcMagic   = "070701"
	headerSize  = 110
	trailerName = "TRAILER!!!"
	// MaxName bounds an entry's name (the kernel's PATH_MAX).
	MaxName = 4096
)

// Mode bits of an entry (the stat(2) ones; io/fs's differ).
const (
	ModeDir  = 0o040000
	ModeFile = 0o100000
	modeType = 0o170000
)

// Writer writes a newc cpio archive: Dir and File add entries, Close
// adds the trailer. Every entry belongs to root, dated 0, hard links
// none. After an error every call returns it.
type Writer struct {
	w   io.Writer
	ino uint32
	err error
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Dir adds a directory (perm: its permission bits). The kernel makes it
// if it is not there and sets its permissions if it is.
func (w *Writer) Dir(name string, perm uint32) error {
	return w.entry(name, ModeDir|perm&0o7777, nil)
}

// File adds a regular file; a file already there (an earlier archive's)
// is replaced.
func (w *Writer) File(name string, perm uint32, data []byte) error {
	return w.entry(name, ModeFile|perm&0o7777, data)
}

// Close writes the trailer. It does not close the underlying writer.
func (w *Writer) Close() error { return w.entry(trailerName, 0, nil) }

func (w *Writer) entry(name string, mode uint32, data []byte) error {
	if w.err != nil {
		return w.err
	}
	if name == "" || len(name) >= MaxName || bytes.IndexByte([]byte(name), 0) >= 0 {
		w.err = fmt.Errorf("cpio: bad entry name %q", name)
		return w.err
	}
	if int64(len(data)) > 0xffffffff {
		w.err = fmt.Errorf("cpio: %s: %d bytes is over newc's 4 GiB", name, len(data))
		return w.err
	}
	nlink := uint32(1)
	if mode&modeType == ModeDir {
		nlink = 2
	}
	w.ino++
	if name == trailerName {
		w.ino = 0
	}
	var b bytes.Buffer
	b.WriteString(newcMagic)
	for _, v := range []uint32{w.ino, mode, 0, 0, nlink, 0, uint32(len(data)), 0, 0, 0, 0, uint32(len(name) + 1), 0} {
		fmt.Fprintf(&b, "%08x", v)
	}
	b.WriteString(name)
	b.WriteByte(0)
	b.Write(make([]byte, pad4(b.Len())))
	if _, err := w.w.Write(b.Bytes()); err != nil {
		w.err = err
		return err
	}
	if len(data) > 0 {
		if _, err := w.w.Write(data); err != nil {
			w.err = err
			return err
		}
		if _, err := w.w.Write(make([]byte, pad4(len(data)))); err != nil {
			w.err = err
			return err
		}
	}
	return nil
}

// pad4 is what pads n bytes to a multiple of 4.
func pad4(n int) int { return (4 - n%4) % 4 }

// Entry is an entry of an archive that Read read.
type Entry struct {
	Name string
	Mode uint32 // type and permission bits, as stat(2)'s st_mode
	Data []byte // a regular file's content (a slice of the archive)
}

// ErrFormat: what Read was given is not a whole newc archive.
var ErrFormat = errors.New("cpio: not a newc archive")

// Read reads the newc archive at the start of b up to its trailer, and
// returns its entries and the archive's length (the trailer's end,
// padded to 4 bytes). It fails with an error wrapping ErrFormat on a
// bad magic, a field that is not hexadecimal, a name or data that runs
// past the end, or a missing trailer. It is how tests read back what
// Writer wrote, and what usher knows of the archives an initramfs
// holds.
func Read(b []byte) ([]Entry, int, error) {
	var entries []Entry
	off := 0
	for {
		if len(b)-off < headerSize || string(b[off:off+6]) != newcMagic {
			return nil, 0, fmt.Errorf("%w: no header at offset %d", ErrFormat, off)
		}
		var f [13]uint64
		for i := range f {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				return nil, 0, fmt.Errorf("%w: header field %d at offset %d", ErrFormat, i, off)
			}
			f[i] = v
		}
		mode, size, nameSize := uint32(f[1]), int(f[6]), int(f[11])
		if nameSize < 1 || nameSize > MaxName {
			return nil, 0, fmt.Errorf("%w: name size %d at offset %d", ErrFormat, nameSize, off)
		}
		nameAt := off + headerSize
		if len(b)-nameAt < nameSize || b[nameAt+nameSize-1] != 0 {
			return nil, 0, fmt.Errorf("%w: name at offset %d", ErrFormat, nameAt)
		}
		name := string(b[nameAt : nameAt+nameSize-1])
		dataAt := nameAt + nameSize
		dataAt += pad4(dataAt)
		if dataAt > len(b) || len(b)-dataAt < size {
			return nil, 0, fmt.Errorf("%w: %q's %d bytes run past the end", ErrFormat, name, size)
		}
		end := dataAt + size
		end += pad4(end)
		if name == trailerName {
			return entries, min(end, len(b)), nil
		}
		entries = append(entries, Entry{Name: name, Mode: mode, Data: b[dataAt : dataAt+size : dataAt+size]})
		off = end
	}
}
