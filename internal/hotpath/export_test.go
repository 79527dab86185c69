package hotpath

import "context"

// WaitLimiter waits until cond holds of l's counts and of how many of
// its connections are idle, or ctx is done.
func WaitLimiter(ctx context.Context, l *Limiter, cond func(st LimitStats, idle int) bool) error {
	for {
		changed := l.changed()
		if cond(l.Stats(), l.idleCount()) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// FileLimit is fileLimit, for tests that size themselves to it.
func FileLimit() (int, bool) { return fileLimit() }
