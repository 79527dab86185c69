package broker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// TestUserGate: one launch of a user at a time, other users never wait,
// a waiter whose context ends gives up, and no user is remembered once
// none of their launches runs or waits.
func TestUserGate(t *testing.T) {
	var g userGate
	ctx := context.Background()
	leaveA, err := g.enter(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// Another user goes through at once.
	leaveB, err := g.enter(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	leaveB()

	// alice's second launch waits for her first.
	var mu sync.Mutex
	var order []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		leave, err := g.enter(ctx, "alice")
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		order = append(order, "second")
		mu.Unlock()
		leave()
	}()
	// A third whose client gives up leaves the queue.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := g.enter(short, "alice"); !errors.Is(err, context.DeadlineExceeded) || site.ErrorCode(err) != site.EUnavailable {
		t.Fatalf("a waiter whose context ended: %v, want %s wrapping its context's error", err, site.EUnavailable)
	}
	mu.Lock()
	order = append(order, "first")
	mu.Unlock()
	leaveA()
	<-done
	if len(order) != 2 || order[0] != "first" {
		t.Fatalf("order %v, want the second launch after the first", order)
	}
	if n := g.waiting(); n != 0 {
		t.Fatalf("%d users remembered after every launch left", n)
	}
}
