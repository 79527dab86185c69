package nfuse

import (
	"fmt"
	"testing"
	"time"
)

func TestLaunchesAreBoundedAndSingleUse(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLaunches(3, func() time.Time { return now })
	add := func(i int, ttl time.Duration) *pendingLaunch {
		p := &pendingLaunch{user: "u", ticket: fmt.Sprint("ticket", i), tag: fmt.Sprint("tag", i), ref: fmt.Sprint("ref", i), expires: now.Add(ttl)}
		l.add(p)
		return p
	}
	for i := range 3 {
		add(i, time.Minute)
	}
	if _, ok := l.take("tag0", "someone else"); ok {
		t.Fatal("another user took a launch")
	}
	if p, ok := l.take("ref0", "u"); !ok || p.ticket != "ticket0" {
		t.Fatalf("take(ref0) = %v, %v", p, ok)
	}
	if _, ok := l.take("tag0", "u"); ok {
		t.Fatal("a launch was taken twice")
	}
	add(3, time.Minute) // the ring is full: the oldest slot (spent tag0) goes
	add(4, time.Minute) // and now tag1, the oldest live one
	if _, ok := l.take("tag1", "u"); ok {
		t.Fatal("the oldest launch outlived the bound")
	}
	if got := l.len(); got != 3 {
		t.Fatalf("%d launches, want 3", got)
	}
	now = now.Add(2 * time.Minute)
	if _, ok := l.take("tag4", "u"); ok {
		t.Fatal("an expired launch was taken")
	}
	add(5, time.Minute) // expired ones go first
	if got := l.len(); got != 1 {
		t.Fatalf("%d launches after expiry, want 1", got)
	}
	if _, ok := l.take("", "u"); ok {
		t.Fatal("the empty key took a launch")
	}
}
