package hostexport

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/usher-vdi/usher/internal/block/hostcache"
	"github.com/usher-vdi/usher/internal/block/nbd"
)

// A Fingerprint names what an upstream connection serves, so that a
// connection dialled again can be compared with the first: Version
// (cheap: the handshake's description and size) or Identity (also
// samples blocks).
type Fingerprint func(ctx context.Context, export string, up *nbd.Client) (string, error)

// Version names the version of export that up serves: the export, the
// image version the stream describes (NBD_INFO_DESCRIPTION "IMAGE
// version N (STATE)", without the state, which changes at promotion) and
// its size. It reads nothing.
func Version(_ context.Context, export string, up *nbd.Client) (string, error) {
	return versionName(export, versionOf(up.Description()), up.Size()), nil
}

func versionName(export, version string, size int64) string {
	return fmt.Sprintf("export=%q version=%q size=%d", export, version, size)
}

// Identity names what a cache keyed by position holds: Version and a
// hash of blocks sampled across it, so that another upstream content
// under the same name is not taken for the same.
func Identity(ctx context.Context, export string, up *nbd.Client) (string, error) {
	const samples, blockSize = 16, 4096
	h := sha256.New()
	buf := make([]byte, blockSize)
	nblocks := up.Size() / blockSize
	for i := range int64(samples) {
		if nblocks == 0 {
			break
		}
		off := i * (nblocks - 1) / (samples - 1) * blockSize
		if err := up.ReadAt(ctx, buf, off); err != nil {
			return "", fmt.Errorf("sample block at %d: %w", off, err)
		}
		h.Write(buf)
	}
	v, _ := Version(ctx, export, up)
	return fmt.Sprintf("%s sample=%x", v, h.Sum(nil)[:16]), nil
}

// Redial is the one rule by which a cache dials its upstream again (the
// dial of hostcache.NewUpstream): a cache holds blocks, or a device's
// writes, over what the first connection served, so a new connection
// must serve the same. It dials export with dial and returns the
// connection when fp of it is want (fp of the first connection); else it
// closes it and returns an error saying what it serves now, so that the
// Upstream keeps dialling (the stream may come back with the version)
// and never mixes two images or versions.
func Redial(export, want string, fp Fingerprint, dial func(context.Context) (*nbd.Client, error)) func(context.Context) (hostcache.Conn, error) {
	return func(ctx context.Context) (hostcache.Conn, error) {
		c, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		got, err := fp(ctx, export, c)
		if err == nil && got != want {
			err = fmt.Errorf("it now serves %s, not %s", got, want)
		}
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}
