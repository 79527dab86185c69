package hostcache_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/hostcache"
)

// childEnv names the cache directory of a child process that fills the
// cache until it is killed.
const childEnv = "USHER_HOSTCACHE_CHILD"

const (
	crashImage = 8 << 20
	crashCache = 1 << 20 // an eighth of the image: blocks are evicted and written all the time
	crashBlock = 4096
)

// child reads random ranges of the image through a cache in dir, forever,
// saying "ready" once it has filled the cache.
func child(dir string) int {
	c, err := hostcache.Open(dir, hostcache.Options{Size: crashCache, BlockSize: crashBlock})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m := block.NewMemory(crashImage)
	m.WriteAt(context.Background(), randomContent(crashImage), 0, 0)
	d := c.Wrap(m, "img")
	r := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	p := make([]byte, 64<<10)
	for i := 0; ; i++ {
		off := r.Int64N(crashImage - int64(len(p)))
		if err := d.ReadAt(context.Background(), p[:1+r.IntN(len(p))], off); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if i == 200 {
			fmt.Println("ready")
		}
	}
}

// TestKilledMidFill: a process filling the cache is killed (SIGKILL) in
// the middle of its writes, three times; after each, the cache opens and
// every byte read through it is the image's: a torn block is never
// served.
func TestKilledMidFill(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	dir := t.TempDir()
	content := randomContent(crashImage)
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child: %q, %v", line, err)
		}
		time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond) // the kill lands at a random moment of the child's reads, by design
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		// Opened with room for the whole image, so that reading it evicts
		// nothing: every block recovered is either served or found torn.
		c, err := hostcache.Open(dir, hostcache.Options{Size: crashImage, BlockSize: crashBlock})
		if err != nil {
			t.Fatalf("round %d: open after the kill: %v", round, err)
		}
		st := c.Stats()
		up := block.NewMemory(crashImage)
		up.WriteAt(context.Background(), content, 0, 0)
		got := make([]byte, crashImage)
		err = c.Wrap(up, "img").ReadAt(context.Background(), got, 0)
		after := c.Stats()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("round %d: the image read through the cache after a kill differs from the image", round)
		}
		if st.Recovered == 0 || after.Hits == 0 {
			t.Fatalf("round %d: %d blocks recovered, %d hits: the cache kept nothing across the kill", round, st.Recovered, after.Hits)
		}
		if after.Hits+after.Corrupt != int64(st.Recovered) || after.Evictions != 0 {
			t.Fatalf("round %d: %d blocks recovered but %d hits, %d torn, %d evicted", round, st.Recovered, after.Hits, after.Corrupt, after.Evictions)
		}
		// The next child opens the small cache again: the directory
		// made smaller keeps the blocks that fit.
		t.Logf("round %d: %d blocks recovered, %d hits, %d corrupt (torn) blocks fetched again", round, st.Recovered, after.Hits, after.Corrupt)
	}
}
