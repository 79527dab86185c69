package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// killChildEnv carries the site DB's DSN to the broker process that
// TestBrokerKilledMidLaunch kills.
const killChildEnv = "USHER_TEST_KILLED_BROKER_DSN"

// TestBrokerKilledMidLaunch: a broker in a process of its own launches
// for users k0001.. at 16 at once, printing each launch acknowledged,
// while a broker in this process launches for others; the first is
// killed (SIGKILL) in the middle of its launches. Then every machine
// counts exactly the sessions it holds (no half-claimed machine), every
// session is on a machine of the site, every launch acknowledged by
// either broker has its session, the only sessions nobody acknowledged
// are the killed broker's (placed before it died), and the surviving
// broker goes on launching.
func TestBrokerKilledMidLaunch(t *testing.T) {
	if dsn := os.Getenv(killChildEnv); dsn != "" {
		launchUntilKilled(dsn)
		return
	}
	ctx := context.Background()
	const users, limit = 600, 10 // 57 × 10 seats: room for all
	cfg := testSite(users, limit)
	for i := 1; i <= 400; i++ {
		cfg.Users = append(cfg.Users, site.User{Name: fmt.Sprintf("k%04d", i), Groups: []string{"all"}})
	}
	dsn := pgtest.DSN(t)
	brokers, stores := pgBrokersOn(t, dsn, cfg, 1)
	survivor, store := brokers[0], stores[0]

	child := exec.Command(os.Args[0], "-test.run=^TestBrokerKilledMidLaunch$", "-test.count=1")
	child.Env = append(os.Environ(), killChildEnv+"="+dsn)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })

	// The survivor launches for u0001..u0300 throughout.
	var mu sync.Mutex
	acked := map[string]*broker.Launch{}
	var survivorErrs atomic.Int32
	launch := func(user string) {
		l, err := survivor.Launch(ctx, broker.LaunchRequest{User: user, Resource: "calc"})
		if err != nil {
			survivorErrs.Add(1)
			t.Errorf("survivor: launch for %s: %v", user, err)
			return
		}
		mu.Lock()
		acked[user] = l
		mu.Unlock()
	}
	var wg sync.WaitGroup
	started := make(chan struct{})
	wg.Go(func() {
		<-started
		for i := 1; i <= 300; i++ {
			launch(fmt.Sprintf("u%04d", i))
		}
	})

	// The killed broker's acknowledgements, up to its death.
	lines := bufio.NewScanner(out)
	killedAcks := map[string]*broker.Launch{}
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) != 4 || f[0] != "ok" {
			continue
		}
		killedAcks[f[1]] = &broker.Launch{Session: site.Session{ID: f[2], User: f[1], Machine: f[3]}}
		if len(killedAcks) == 20 {
			close(started)
		}
		if len(killedAcks) == 150 {
			if err := child.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = child.Wait()
	if len(killedAcks) < 150 {
		t.Fatalf("the child broker acknowledged %d launches and ended (%v) before it was killed", len(killedAcks), err)
	}
	wg.Wait()

	// The survivor goes on.
	for i := 301; i <= 350; i++ {
		launch(fmt.Sprintf("u%04d", i))
	}
	if survivorErrs.Load() > 0 {
		t.FailNow()
	}

	// The site DB as the kill left it.
	err = store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{Live: true}, site.ListOptions{})
		if err != nil {
			return err
		}
		live, pending := map[string]int{}, map[string]int{}
		byID := map[string]site.Session{}
		for _, s := range p.Items {
			byID[s.ID] = s
			if _, _, ok := survivor.Snapshot().Machine(s.Machine); !ok {
				t.Errorf("session %s of %s is on %q, not a machine of the site", s.ID, s.User, s.Machine)
			}
			live[s.Machine]++
			if s.State == site.SessionPending {
				pending[s.Machine]++
			}
		}
		unacked := 0
		for _, ack := range []map[string]*broker.Launch{acked, killedAcks} {
			for user, l := range ack {
				s, ok := byID[l.Session.ID]
				if !ok || s.User != user || s.Machine != l.Session.Machine {
					t.Errorf("lost: the launch acknowledged to %s (session %s on %s) is %+v", user, l.Session.ID, l.Session.Machine, s)
				}
				delete(byID, l.Session.ID)
			}
		}
		for _, s := range byID {
			if !strings.HasPrefix(s.User, "k") {
				t.Errorf("session %s of %s on %s was never acknowledged", s.ID, s.User, s.Machine)
			}
			unacked++
		}
		t.Logf("killed after %d acknowledged launches (%d placed and not acknowledged); the survivor acknowledged %d", len(killedAcks), unacked, len(acked))
		all, err := tx.MachineStatuses(ctx)
		if err != nil {
			return err
		}
		for m, st := range all {
			if st.Sessions != live[m] || st.LogonsInProgress != pending[m] {
				t.Errorf("machine %s counts %d sessions (%d logging on) but holds %d (%d pending)", m, st.Sessions, st.LogonsInProgress, live[m], pending[m])
			}
			if live[m] > limit {
				t.Errorf("machine %s holds %d sessions, over its limit of %d", m, live[m], limit)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// launchUntilKilled is the child of TestBrokerKilledMidLaunch: a broker
// on the site DB at dsn launching for k0001.. at 16 at once, printing
// "ok USER SESSION MACHINE" for each acknowledged launch, until it is
// killed (or, should nobody kill it, for a minute).
func launchUntilKilled(dsn string) {
	ctx := context.Background()
	store, err := pgstore.Open(ctx, dsn, pgstore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child broker:", err)
		os.Exit(2)
	}
	b, err := broker.New(ctx, broker.Config{Store: store, Control: sitetest.NewControl(), MaxConcurrent: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child broker:", err)
		os.Exit(2)
	}
	var next atomic.Int32
	var out sync.Mutex
	for range 16 {
		go func() {
			for {
				user := fmt.Sprintf("k%04d", next.Add(1))
				l, err := b.Launch(ctx, broker.LaunchRequest{User: user, Resource: "calc"})
				if err != nil {
					fmt.Fprintln(os.Stderr, "child broker: launch:", err)
					continue
				}
				out.Lock()
				fmt.Fprintf(os.Stdout, "ok %s %s %s\n", user, l.Session.ID, l.Session.Machine)
				out.Unlock()
			}
		}()
	}
	time.Sleep(time.Minute) // the parent kills this child long before: a bound on its life, not a wait
	os.Exit(0)
}
