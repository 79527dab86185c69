package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/site"
)

// Site is a running usher site under test.
type Site interface {
	// URL is the site's HTTP base: http://127.0.0.1:PORT.
	URL() string
	Close() error
}

// Hasher is a Site that counts its argon2id computations: password
// checks against an account's hash, and decoys for unknown or locked-out
// names.
type Hasher interface {
	Hashes() (checks, decoys int64)
}

// CheckTimer is a Hasher that also times its password checks: the time
// they took in all, each from when it had a hashing slot.
type CheckTimer interface {
	CheckTime() time.Duration
}

// StartFunc starts a site holding cfg and returns once every machine's
// simulated VDA has registered.
type StartFunc func(ctx context.Context, cfg *site.Config) (Site, error)

// Bench site shape: the zones-and-latency test's 57 VDAs in one delivery group, and the
// demo's 400 applications on them.
const (
	Machines      = 57
	DeliveryGroup = "Bench Apps"
	Catalog       = "bench-rdsh"
	Domain        = "DEMO"
)

// SiteConfig returns the bench site: one multi-session catalog of 57
// machines, one delivery group publishing the demo's 400 applications
// (and no desktop), and users user0001... (at least the demo's 1,000) in
// one group entitled to it, all sharing one argon2id password hash. The
// session limit leaves room for sessions, sessions per machine, so that
// capacity never ends a run; the other load rules are Citrix's defaults.
func SiteConfig(users, sessions int, passwordHash string) *site.Config {
	base := demo.Site()
	c := &site.Config{
		Settings: site.Settings{Name: "usher bench", Domain: Domain},
		Zones:    base.Zones,
		Catalogs: []site.Catalog{{Name: Catalog, Kind: site.MultiSession, Zone: demo.Zone, Description: "The zones-and-latency test's 57 VDAs."}},
		Groups:   []site.Group{{Name: demo.DomainUsers, Description: "Every bench user."}},
	}
	for i := 1; i <= Machines; i++ {
		name := fmt.Sprintf("bench-vda-%02d", i)
		c.Machines = append(c.Machines, site.Machine{Name: name, Catalog: Catalog, Address: name + ".bench.internal:3389"})
	}
	dg := site.NewDeliveryGroup(DeliveryGroup, Catalog)
	dg.Description = "Every application, on every machine."
	dg.LoadRules.MaxSessions.Limit = max(dg.LoadRules.MaxSessions.Limit, int(math.Ceil(float64(sessions)*1.2/Machines))+10)
	c.DeliveryGroups = []site.DeliveryGroup{dg}
	for _, a := range base.Applications {
		a.DeliveryGroups = []string{DeliveryGroup}
		c.Applications = append(c.Applications, a)
	}
	for i := 1; i <= max(users, demo.Users); i++ {
		c.Users = append(c.Users, site.User{Name: demo.UserName(i), Groups: []string{demo.DomainUsers}, PasswordHash: passwordHash})
	}
	c.Entitlements = []site.Entitlement{{Name: "everyone", DeliveryGroup: DeliveryGroup, Groups: []string{demo.DomainUsers}}}
	c.Normalize()
	return c
}

// Applications returns the names of the bench site's applications.
func Applications() []string {
	var names []string
	for _, a := range demo.Site().Applications {
		names = append(names, a.Name)
	}
	return names
}

// Users returns the credentials of users 1 to n of the bench site.
func Users(n int, password string) loadgen.Users {
	u := make(loadgen.Users, n)
	for i := range u {
		u[i] = loadgen.Credential{User: demo.UserName(i + 1), Password: password, Domain: Domain}
	}
	return u
}

// Env is what every experiment shares.
type Env struct {
	Start StartFunc
	// StartDB starts a site on a PostgreSQL site DB, for the experiments
	// that need one (LaunchOverLatency).
	StartDB DBStartFunc
	// StartLHC starts the demo site on a PostgreSQL site DB with a broker
	// that keeps a Local Host Cache, for the lhc experiment.
	StartLHC LHCStartFunc
	Log      *slog.Logger
	Stdout   io.Writer // tables and notes as they come
	// Progress, when set, gets each run's live figures.
	Progress func(loadgen.Progress)
	// Timeout bounds each transaction (default loadgen.DefaultTimeout).
	Timeout time.Duration
	// Self is the command line that runs this usher binary (its path, and
	// for a test binary what makes it one), for load generators that run
	// in their own process; nil runs them in this one.
	Self []string
}

func (e Env) logger() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.New(slog.DiscardHandler)
}

func (e Env) out() io.Writer {
	if e.Stdout != nil {
		return e.Stdout
	}
	return io.Discard
}

func (e Env) options() loadgen.Options {
	return loadgen.Options{Timeout: e.Timeout, Progress: e.Progress, Logger: e.Log}
}

// startSite makes a password, the bench site for users and sessions, and
// starts it.
func (e Env) startSite(ctx context.Context, users, sessions int) (Site, string, error) {
	password := auth.RandomSecret(12)
	hash, err := auth.HashPassword(password, auth.DefaultParams)
	if err != nil {
		return nil, "", err
	}
	cfg := SiteConfig(users, sessions, hash)
	start := time.Now()
	s, err := e.Start(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("start the bench site: %w", err)
	}
	e.logger().Info("bench site up", "url", s.URL(), "users", len(cfg.Users), "machines", len(cfg.Machines),
		"applications", len(cfg.Applications), "took", time.Since(start).Round(time.Millisecond))
	return s, password, nil
}

func fmtSec(ms float64) string { return fmt.Sprintf("%.2f", ms/1000) }

func fmtF(f float64, prec int) string { return fmt.Sprintf("%.*f", prec, f) }

// machineNote describes where the figures were measured.
func machineNote(r *loadgen.Report) string {
	return fmt.Sprintf("Measured on %s (%s CPUs, %s), client and server on one machine over loopback; TCP congestion control %s, default qdisc %s.",
		r.Host["hostname"], r.Host["cpus"], r.Host["os"], r.Host["tcp_congestion_control"], r.Host["default_qdisc"])
}
