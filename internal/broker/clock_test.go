package broker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// run starts b's Run loop until the test ends, and waits for it to return
// before the test's earlier cleanups (the site DB's Close) run.
func run(t *testing.T, b *broker.Broker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// advance lets the fake clock of a synctest bubble run for d, then waits
// until every goroutine of the bubble is blocked: the Run loop's sweeps
// that were due by then have finished.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// machineStatus reads a machine's status from the site DB.
func machineStatus(t *testing.T, store site.Store, machine string) site.MachineStatus {
	t.Helper()
	ctx := context.Background()
	var st site.MachineStatus
	if err := store.View(ctx, func(tx site.Tx) (err error) { st, err = tx.MachineStatus(ctx, machine); return err }); err != nil {
		t.Fatal(err)
	}
	return st
}

// session reads a session from the site DB.
func session(t *testing.T, store site.Store, id string) site.Session {
	t.Helper()
	ctx := context.Background()
	var s site.Session
	if err := store.View(ctx, func(tx site.Tx) (err error) { s, err = tx.Sessions().Get(ctx, id); return err }); err != nil {
		t.Fatal(err)
	}
	return s
}
