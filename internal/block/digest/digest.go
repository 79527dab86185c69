// Package digest is the table of content digests of an image version's
// blocks: the image store computes one per version, the stream serves it
// to caches as an export of its own (ExportName), and a host cache keys
// its blocks by them, so that a block is fetched and kept once however
// many versions and images hold it.
//
// A digest is SHA-256 of a block's bytes; blocks are BlockSize bytes
// except the last, which holds the rest of the image. The table's wire
// form, also its file form in the store, is a header of HeaderSize
// bytes then the digests in block order:
//
//	offset  size  field (integers little-endian)
//	0       8     magic "USHERDG1"
//	8       4     block size
//	12      8     image size
//	20      4     CRC-32C (Castagnoli) of the digests
//	24      4     CRC-32C of bytes 0..24
//	28      ...   zeros up to HeaderSize
//
// The block count is ceil(image size / block size); the table's length is
// HeaderSize + 32 × count.
package digest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/usher-vdi/usher/internal/block"
)

// BlockSize is the unit the store computes digests over.
const BlockSize = 64 << 10

// HeaderSize is the length of a table's header.
const HeaderSize = 4096

// Suffix ends the export name of a version's table: IMAGE@N/digests.
// '/' is not allowed in image names, so no image's export ends so.
const Suffix = "/digests"

// maxBlocks bounds a table Decode accepts: 2^28 blocks of 64 KiB is a
// 16 TiB image, 8 GiB of digests.
const maxBlocks = 1 << 28

const magic = "USHERDG1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sum is a block's digest: SHA-256 of its bytes.
type Sum [32]byte

// Of returns the digest of p.
func Of(p []byte) Sum { return sha256.Sum256(p) }

var zeroBlock = Of(make([]byte, BlockSize))

// IsZero reports whether s is the digest of n zero bytes, so that a
// reader can make the block without fetching it. It is cheap for a
// whole block.
func IsZero(s Sum, n int) bool {
	if n == BlockSize {
		return s == zeroBlock
	}
	return s == Of(make([]byte, n))
}

// ExportName is the export of the table of export (IMAGE or IMAGE@N).
func ExportName(export string) string { return export + Suffix }

// ParseExportName returns the export whose table name is, and whether
// name is a table's.
func ParseExportName(name string) (string, bool) {
	return strings.CutSuffix(name, Suffix)
}

// Table is the digests of a version's blocks.
type Table struct {
	BlockSize int
	Size      int64 // the image's bytes
	Sums      []Sum
}

// Blocks returns how many blocks an image of size bytes has.
func Blocks(size int64, blockSize int) int64 {
	return (size + int64(blockSize) - 1) / int64(blockSize)
}

// Len returns the length of block i: BlockSize, or less for the last.
func (t *Table) Len(i int64) int {
	return int(min(int64(t.BlockSize), t.Size-i*int64(t.BlockSize)))
}

// EncodedSize is the length of t's wire form.
func (t *Table) EncodedSize() int64 { return HeaderSize + 32*int64(len(t.Sums)) }

// Header returns the header of t's wire form.
func (t *Table) Header() []byte {
	h := make([]byte, HeaderSize)
	copy(h, magic)
	binary.LittleEndian.PutUint32(h[8:], uint32(t.BlockSize))
	binary.LittleEndian.PutUint64(h[12:], uint64(t.Size))
	c := crc32.New(castagnoli)
	for i := range t.Sums {
		c.Write(t.Sums[i][:])
	}
	binary.LittleEndian.PutUint32(h[20:], c.Sum32())
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], castagnoli))
	return h
}

// MarshalBinary returns t's wire form.
func (t *Table) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, t.EncodedSize())
	b = append(b, t.Header()...)
	for i := range t.Sums {
		b = append(b, t.Sums[i][:]...)
	}
	return b, nil
}

// ParseHeader checks a table's header and returns its block size and
// image size, and the CRC of its digests.
func ParseHeader(h []byte) (blockSize int, size int64, crc uint32, err error) {
	if len(h) < HeaderSize {
		return 0, 0, 0, fmt.Errorf("digest table: a header of %d bytes, want %d", len(h), HeaderSize)
	}
	if string(h[:8]) != magic {
		return 0, 0, 0, errors.New("digest table: not a digest table (bad magic)")
	}
	if crc32.Checksum(h[:24], castagnoli) != binary.LittleEndian.Uint32(h[24:]) {
		return 0, 0, 0, errors.New("digest table: damaged header (CRC mismatch)")
	}
	if !block.IsZero(h[28:HeaderSize]) {
		return 0, 0, 0, errors.New("digest table: a header with unknown fields (this usher is older than the table)")
	}
	bs := binary.LittleEndian.Uint32(h[8:])
	sz := binary.LittleEndian.Uint64(h[12:])
	if bs < 512 || bs > 1<<24 || bs&(bs-1) != 0 {
		return 0, 0, 0, fmt.Errorf("digest table: block size %d is not a power of two between 512 and 16 MiB", bs)
	}
	if sz == 0 || sz > uint64(maxBlocks)*uint64(bs) {
		return 0, 0, 0, fmt.Errorf("digest table: image size %d is out of range", sz)
	}
	return int(bs), int64(sz), binary.LittleEndian.Uint32(h[20:]), nil
}

// UnmarshalBinary parses a table's wire form, which must be whole and
// match its CRCs.
func (t *Table) UnmarshalBinary(b []byte) error {
	bs, size, crc, err := ParseHeader(b)
	if err != nil {
		return err
	}
	n := Blocks(size, bs)
	if int64(len(b)) != HeaderSize+32*n {
		return fmt.Errorf("digest table: %d bytes, want %d for %d blocks", len(b), HeaderSize+32*n, n)
	}
	body := b[HeaderSize:]
	if crc32.Checksum(body, castagnoli) != crc {
		return errors.New("digest table: damaged digests (CRC mismatch)")
	}
	t.BlockSize, t.Size = bs, size
	t.Sums = make([]Sum, n)
	for i := range t.Sums {
		copy(t.Sums[i][:], body[32*i:])
	}
	return nil
}

// Compute reads d and returns the digests of its blocks of blockSize
// bytes. progress, when set, is called after each MiB-aligned chunk with
// the bytes read so far.
func Compute(ctx context.Context, d block.Device, blockSize int, progress func(done int64)) (*Table, error) {
	t := &Table{BlockSize: blockSize, Size: d.Size(), Sums: make([]Sum, Blocks(d.Size(), blockSize))}
	all := make([]int64, len(t.Sums))
	for i := range all {
		all[i] = int64(i)
	}
	return t, t.Update(ctx, d, all, progress)
}

// Update computes again the digests of the listed blocks (in ascending
// order) from d, which holds t's image.
func (t *Table) Update(ctx context.Context, d block.Device, blocks []int64, progress func(done int64)) error {
	if d.Size() != t.Size {
		return fmt.Errorf("digest table: the device has %d bytes, the table %d", d.Size(), t.Size)
	}
	const chunk = 1 << 20
	per := max(1, chunk/t.BlockSize)
	buf := make([]byte, per*t.BlockSize)
	var done int64
	for len(blocks) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A run of consecutive blocks is one read.
		n := 1
		for n < len(blocks) && n < per && blocks[n] == blocks[0]+int64(n) {
			n++
		}
		first := blocks[0]
		off := first * int64(t.BlockSize)
		length := min(int64(n*t.BlockSize), t.Size-off)
		p := buf[:length]
		if err := d.ReadAt(ctx, p, off); err != nil {
			return fmt.Errorf("digest of block %d: %w", first, err)
		}
		for j := range n {
			b := p[j*t.BlockSize : min(len(p), (j+1)*t.BlockSize)]
			t.Sums[first+int64(j)] = Of(b)
		}
		blocks = blocks[n:]
		done += length
		if progress != nil {
			progress(done)
		}
	}
	return nil
}
