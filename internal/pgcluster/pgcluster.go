// Package pgcluster is a throwaway PostgreSQL cluster: initdb and pg_ctl
// (from /usr/lib/postgresql/*/bin or PATH) start one in a temporary
// directory, listening on a unix socket there only, as the postgres user
// when root runs it, for a bench or a test that may crash the server and
// start it again (usher bench lhc's crash cuts; internal/pgtest when there
// is no other server).
//
// Only commands, internal/bench, internal/pgtest and tests import this
// package; it takes no testing.TB.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/usher-vdi/usher/internal/pgadmin"
)

// Cluster is a throwaway PostgreSQL cluster in a temporary directory,
// listening on a unix socket there only: a site DB a test or a bench may
// crash and start again.
type Cluster struct {
	dir, bin string
	runAs    []string // runuser -u postgres --, when root runs the tests
	dsn      string
}

// Start creates and starts a cluster that listens on a unix socket
// in its directory only, as the postgres user when root runs it
// (PostgreSQL refuses to run as root).
func Start() (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	// A unix socket's path is short: the directory goes under /tmp.
	dir, err := os.MkdirTemp("/tmp", "usher-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, errors.New("usher runs as root, and there is no postgres user to run initdb as")
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			os.RemoveAll(dir)
			return nil, errors.New("usher runs as root, and there is no runuser to run initdb as postgres")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.runAs = []string{runuser, "-u", "postgres", "--"}
	}
	data := filepath.Join(dir, "data")
	if out, err := c.run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := c.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.dsn = "host=" + dir + " port=5432 user=postgres dbname=postgres sslmode=disable"
	if err := ping(c.dsn); err != nil {
		c.Stop()
		return nil, fmt.Errorf("the throwaway cluster does not answer: %w", err)
	}
	return c, nil
}

// Start starts the cluster's server, listening on its socket only.
func (c *Cluster) Start() error {
	opts := "-k " + c.dir + " -c listen_addresses='' -F -c full_page_writes=off -c max_connections=200"
	if out, err := c.run("pg_ctl", "-D", filepath.Join(c.dir, "data"), "-l", filepath.Join(c.dir, "log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	return nil
}

func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	argv := append(slices.Clone(c.runAs), filepath.Join(c.bin, name))
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

// Stop stops the cluster and removes its directory.
func (c *Cluster) Stop() error {
	out, err := c.run("pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop")
	if rerr := os.RemoveAll(c.dir); err == nil && rerr != nil {
		return fmt.Errorf("remove the throwaway cluster: %w", rerr)
	}
	if err != nil {
		return fmt.Errorf("stop the throwaway cluster: %v\n%s", err, out)
	}
	return nil
}

// binDir returns the directory of the newest PostgreSQL's initdb and
// pg_ctl.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if d := filepath.Dir(p); isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", errors.New("no initdb and pg_ctl in /usr/lib/postgresql/*/bin or PATH (install postgresql)")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// DSN connects to the cluster's postgres database, as postgres.
func (c *Cluster) DSN() string { return c.dsn }

// Crash stops the cluster as a crash would (pg_ctl stop -m immediate: no
// checkpoint, recovery at the next Start).
func (c *Cluster) Crash() error {
	if out, err := c.run("pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %v\n%s", err, out)
	}
	return nil
}

func ping(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return pgadmin.Exec(ctx, dsn, "SELECT 1")
}
