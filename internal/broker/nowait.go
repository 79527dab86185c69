package broker

import (
	"context"
	"errors"
)

// ErrWouldWait is returned, with nothing done and nothing counted, by a
// call made with a context from NoWait when answering would wait: on a
// password check that the verified-credential cache cannot answer, on
// the site DB's lock-out count, or on the directory.
var ErrWouldWait = errors.New("broker: answering would wait")

type noWaitKey struct{}

// NoWait returns a context under which Authenticate and User answer only
// from memory, and return ErrWouldWait when they cannot. An event loop
// that serves many connections on one goroutine calls them so, and runs
// a request that would wait again where it may (internal/hotpath).
func NoWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, noWaitKey{}, true)
}

func mustNotWait(ctx context.Context) bool {
	v, _ := ctx.Value(noWaitKey{}).(bool)
	return v
}
