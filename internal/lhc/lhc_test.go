package lhc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// flaky is a site DB that stops answering while down is set, and whose
// placements are made but their answers lost while loseAnswers is. When
// hold is set (before the placements), a placement tells placing that it
// has begun and waits for hold to close before it reaches the database.
type flaky struct {
	site.Store
	down, loseAnswers atomic.Bool
	hold, placing     chan struct{}
}

func (f *flaky) err() error {
	if f.down.Load() {
		return site.Errorf(site.EUnavailable, "site DB cut off (test)")
	}
	return nil
}

func (f *flaky) View(ctx context.Context, fn func(site.Tx) error) error {
	if err := f.err(); err != nil {
		return err
	}
	return f.Store.View(ctx, fn)
}

func (f *flaky) Update(ctx context.Context, fn func(site.Tx) error) error {
	if err := f.err(); err != nil {
		return err
	}
	return f.Store.Update(ctx, fn)
}

func (f *flaky) Place(ctx context.Context, p site.Placement) (site.Placed, error) {
	if err := f.err(); err != nil {
		return site.Placed{}, err
	}
	if f.hold != nil {
		select {
		case f.placing <- struct{}{}:
		default:
		}
		<-f.hold
	}
	out, err := f.Store.Place(ctx, p)
	if err == nil && f.loseAnswers.Load() {
		return site.Placed{}, site.Errorf(site.EUnavailable, "connection lost before the answer (test)")
	}
	return out, err
}

// newPrimary is the demo site in a SQLite site DB standing in for the
// PostgreSQL one.
func newPrimary(t *testing.T) *flaky {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "site.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := demo.Load(ctx, db, "pw-lhc-unit-1", auth.Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1, SaltLen: 16, KeyLen: 32}); err != nil {
		t.Fatal(err)
	}
	if _, err := site.EnsureSecret(ctx, db, site.SecretTokenKey, func() ([]byte, error) { return []byte(strings.Repeat("k", 32)), nil }); err != nil {
		t.Fatal(err)
	}
	return &flaky{Store: db}
}

func open(t *testing.T, primary site.Store, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Open: func(context.Context) (site.Store, error) { return primary, nil },
		Dir: dir, ProbeInterval: 20 * time.Millisecond, OutageAfter: 100 * time.Millisecond, RecoverAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestCopyIsReplacedWhole: a copy that fails part way leaves the last
// good one, which still opens.
func TestCopyIsReplacedWhole(t *testing.T) {
	primary := newPrimary(t)
	dir := t.TempDir()
	s := open(t, primary, dir)
	if err := s.copyNow(); err != nil {
		t.Fatal(err)
	}
	db, first, err := openCopy(context.Background(), filepath.Join(dir, CopyFile), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	// A configuration change, then a copy that cannot be written: its
	// temporary file's place is taken by a directory that cannot go.
	err = primary.Update(context.Background(), func(tx site.Tx) error {
		return tx.Groups().Create(context.Background(), site.Group{Name: "newcomers"})
	})
	if err != nil {
		t.Fatal(err)
	}
	blocker := filepath.Join(dir, CopyFile+".new")
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.copyNow(); err == nil {
		t.Fatal("a copy whose file cannot be written succeeded")
	}
	db, info, err := openCopy(context.Background(), filepath.Join(dir, CopyFile), nil, true)
	if err != nil {
		t.Fatalf("the last good copy does not open after a failed copy: %v", err)
	}
	db.Close()
	if info.version != first.version {
		t.Errorf("copy version %d after a failed copy, want the last good one's %d", info.version, first.version)
	}
	os.RemoveAll(blocker)
	if err := s.copyNow(); err != nil {
		t.Fatal(err)
	}
	db, info, err = openCopy(context.Background(), filepath.Join(dir, CopyFile), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if info.version != first.version+1 {
		t.Errorf("copy version %d after the change, want %d", info.version, first.version+1)
	}
}

// TestOutageRefusesWhatOnlyTheSiteDBMayDo: in outage mode configuration
// and admin changes fail with site_db_unavailable, sessions are written
// and journaled, and ending the outage writes them back exactly as they
// are, the journal emptied.
func TestOutageRefusesWhatOnlyTheSiteDBMayDo(t *testing.T) {
	ctx := context.Background()
	primary := newPrimary(t)
	s := open(t, primary, t.TempDir())
	if err := s.copyNow(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Force(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !s.InOutage() {
		t.Fatal("forced outage: not in outage mode")
	}
	for what, fn := range map[string]func(tx site.Tx) error{
		"create a group":   func(tx site.Tx) error { return tx.Groups().Create(ctx, site.Group{Name: "g2"}) },
		"change settings":  func(tx site.Tx) error { return tx.SetSettings(ctx, site.Settings{}) },
		"set a secret":     func(tx site.Tx) error { return tx.SetSecret(ctx, "x", []byte("y")) },
		"delete an admin":  func(tx site.Tx) error { return tx.Admins().Delete(ctx, "admin") },
		"delete a session": func(tx site.Tx) error { return tx.Sessions().Delete(ctx, "nope") },
		"set preferences": func(tx site.Tx) error {
			_, err := tx.Preferences().Put(ctx, demo.UserName(1), site.Preferences{Favourites: []string{demo.OfficeDesktop}})
			return err
		},
		"delete preferences": func(tx site.Tx) error { return tx.Preferences().Delete(ctx, demo.UserName(1)) },
	} {
		if err := s.Update(ctx, fn); site.ErrorCode(err) != site.ESiteDBUnavailable {
			t.Errorf("%s in outage mode: %v, want %s", what, err, site.ESiteDBUnavailable)
		}
	}
	machine := demo.OfficeApps
	var m string
	err := s.View(ctx, func(tx site.Tx) error {
		p, err := tx.Machines().List(ctx, site.ListOptions{Limit: 1})
		if err == nil {
			m = p.Items[0].Name
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := site.Session{ID: "outage-session-1", User: demo.UserName(1), Resource: demo.OfficeDesktop, DeliveryGroup: machine,
		Machine: m, State: site.SessionActive, CreatedAt: now, UpdatedAt: now}
	if err := s.Update(ctx, func(tx site.Tx) error { return tx.Sessions().Create(ctx, sess) }); err != nil {
		t.Fatal(err)
	}
	if got := s.Status(); got.Mode != Outage || !got.Forced {
		t.Errorf("status %+v, want a forced outage", got)
	}
	if _, err := s.Force(ctx, false); err != nil {
		t.Fatal(err)
	}
	if s.InOutage() {
		t.Fatal("still in outage mode after the force ended")
	}
	var back site.Session
	err = primary.View(ctx, func(tx site.Tx) (err error) {
		back, err = tx.Sessions().Get(ctx, sess.ID)
		return err
	})
	if err != nil || back != sess {
		t.Fatalf("written back: %+v, %v; want %+v", back, err, sess)
	}
	if got := s.Status().WrittenBack; got != 1 {
		t.Errorf("%d sessions written back, want 1", got)
	}
}

// TestStartWithoutTheSiteDB: a broker whose site DB cannot be opened
// starts from its copy, in outage mode; with no copy, or a copy that is
// not a site, it refuses to start and says why.
func TestStartWithoutTheSiteDB(t *testing.T) {
	ctx := context.Background()
	primary := newPrimary(t)
	dir := t.TempDir()
	s := open(t, primary, dir)
	if err := s.copyNow(); err != nil {
		t.Fatal(err)
	}
	down := func(context.Context) (site.Store, error) {
		return nil, site.Errorf(site.EUnavailable, "connection refused (test)")
	}
	again, err := Open(ctx, Options{Open: down, Dir: dir})
	if err != nil {
		t.Fatalf("start from the copy: %v", err)
	}
	if !again.InOutage() {
		t.Error("started from the copy, but not in outage mode")
	}
	again.Close()

	for name, content := range map[string][]byte{"missing": nil, "corrupt": []byte("SQLite format 3\x00 and then nothing")} {
		d := t.TempDir()
		if content != nil {
			if err := os.WriteFile(filepath.Join(d, CopyFile), content, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Open(ctx, Options{Open: down, Dir: d})
		if err == nil || !strings.Contains(err.Error(), "nothing to broker from") || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("%s copy: %v, want a refusal naming both causes", name, err)
		}
	}
}

// heldRead is a site DB whose next View, once armed, reads and then
// waits to return until released: a copy that read the site, slow to
// write it.
type heldRead struct {
	*flaky
	armed            atomic.Bool
	entered, release chan struct{}
}

func (h *heldRead) View(ctx context.Context, fn func(site.Tx) error) error {
	err := h.flaky.View(ctx, fn)
	if h.armed.CompareAndSwap(true, false) {
		close(h.entered)
		<-h.release
	}
	return err
}

// TestOlderCopyDoesNotReplaceANewerOne: two copies made at once (Force's
// first copy beside the periodic one) finish in the opposite order to
// their reads; the copy in place is the one read last.
func TestOlderCopyDoesNotReplaceANewerOne(t *testing.T) {
	primary := &heldRead{flaky: newPrimary(t), entered: make(chan struct{}), release: make(chan struct{})}
	dir := t.TempDir()
	s := open(t, primary, dir)
	if err := s.copyNow(); err != nil {
		t.Fatal(err)
	}
	first := copyInfoOf(t, dir)
	primary.armed.Store(true)
	older := make(chan error, 1)
	go func() { older <- s.copyNow() }()
	<-primary.entered // the older copy has read the site
	err := primary.Update(context.Background(), func(tx site.Tx) error {
		return tx.Groups().Create(context.Background(), site.Group{Name: "newcomers"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.copyNow(); err != nil {
		t.Fatal(err)
	}
	close(primary.release)
	if err := <-older; err != nil {
		t.Fatalf("the older copy: %v", err)
	}
	info := copyInfoOf(t, dir)
	if want := first.version + 1; info.version != want {
		t.Errorf("copy in place holds version %d, want the newer copy's %d", info.version, want)
	}
	if st := s.Status(); st.CopyVersion != first.version+1 {
		t.Errorf("status says the copy holds version %d, want %d", st.CopyVersion, first.version+1)
	}
}

// copyInfoOf opens the copy in dir whole and reports what it holds.
func copyInfoOf(t *testing.T, dir string) copyInfo {
	t.Helper()
	db, info, err := openCopy(context.Background(), filepath.Join(dir, CopyFile), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	return info
}
