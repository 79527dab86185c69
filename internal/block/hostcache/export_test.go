package hostcache

import "os"

// BreakWrites makes c's blocks file refuse writes, as a full or
// read-only disk does; reads of it go on.
func BreakWrites(c *Cache) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.Open(c.blocks.Name())
	if err != nil {
		return err
	}
	c.blocks.Close()
	c.blocks = f
	return nil
}
