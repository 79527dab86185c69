package broker

import (
	"context"
	"errors"
	"testing"
)

// TestNoWaitDirectory: under NoWait, a directory logon or read that
// would ask the directory returns ErrWouldWait having asked and counted
// nothing; once a logon off the loop verified the password, the same
// logon answers from memory.
func TestNoWaitDirectory(t *testing.T) {
	h := newDirHarness(t, nil)
	d := h.dir()
	ctx := NoWait(context.Background())
	if _, err := h.b.Authenticate(ctx, "alice", alicePassword, ""); !errors.Is(err, ErrWouldWait) {
		t.Fatalf("first logon under NoWait: %v, want ErrWouldWait", err)
	}
	if _, err := h.b.User(ctx, "bob"); !errors.Is(err, ErrWouldWait) {
		t.Fatalf("reading an unread user under NoWait: %v, want ErrWouldWait", err)
	}
	for range 5 { // more than the lock-out threshold: none may count
		if _, err := h.b.Authenticate(ctx, "alice", "wrong", ""); !errors.Is(err, ErrWouldWait) {
			t.Fatalf("wrong password under NoWait: %v, want ErrWouldWait", err)
		}
	}
	if auths, lookups := d.calls("alice"); auths != 0 || lookups != 0 {
		t.Fatalf("NoWait asked the directory: %d binds, %d reads", auths, lookups)
	}
	h.mustLogon("alice", alicePassword) // not locked out by the refusals above
	u, err := h.b.Authenticate(ctx, "alice", alicePassword, "")
	if err != nil || u.Name != "Alice" {
		t.Fatalf("verified logon under NoWait: %v, %v", u, err)
	}
	if _, err := h.b.User(ctx, "alice"); err != nil {
		t.Fatalf("reading a read user under NoWait: %v", err)
	}
	if auths, _ := d.calls("alice"); auths != 1 {
		t.Errorf("%d binds, want the one logon off the loop", auths)
	}
}
