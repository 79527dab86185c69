package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/site"
)

// configChannel is the channel on which a committed configuration change
// is notified, with "SCHEMA VERSION" as the payload: several sites may
// share a database in schemas of their own.
const configChannel = "usher_config"

// changedName records a successful write of the object named name (as
// stored) of a kind that sp describes.
func (c collection[T]) changedName(name string) {
	if c.sp.config {
		c.t.logChange(c.sp.kind, name)
	}
}

// logChange records a write of the configuration: commit moves the
// version and logs the object under it.
func (t *tx) logChange(kind site.Kind, name string) {
	t.configChanged = true
	if t.changes == nil {
		t.changes = map[site.ConfigChange]bool{}
	}
	t.changes[site.ConfigChange{Kind: kind, Name: name}] = true
}

// versionQueries move the configuration version, log what changed under
// the new version, forget what is older than site.ConfigLogKeep versions
// and notify the brokers listening, all at commit.
func (t *tx) versionQueries() []*pgx.QueuedQuery {
	keys := slices.SortedFunc(maps.Keys(t.changes), func(a, b site.ConfigChange) int {
		return cmp.Or(strings.Compare(string(a.Kind), string(b.Kind)), strings.Compare(a.Name, b.Name))
	})
	kinds, names := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		kinds[i], names[i] = string(k.Kind), k.Name
	}
	return []*pgx.QueuedQuery{
		{SQL: `UPDATE settings SET config_version = config_version + 1 WHERE id = 1`},
		{SQL: `INSERT INTO config_log (version, kind, name)
			SELECT s.config_version, c.kind, c.name FROM settings s, unnest($1::text[], $2::text[]) AS c (kind, name) WHERE s.id = 1`,
			Arguments: []any{kinds, names}},
		{SQL: `DELETE FROM config_log WHERE version <= (SELECT config_version FROM settings WHERE id = 1) - $1::bigint`,
			Arguments: []any{int64(site.ConfigLogKeep)}},
		{SQL: `SELECT pg_notify('` + configChannel + `', current_schema() || ' ' || config_version) FROM settings WHERE id = 1`},
	}
}

// ConfigChanges reads the change log after since in one round trip (with
// the version, in a View's first).
func (t *tx) ConfigChanges(ctx context.Context, since int64) ([]site.ConfigChange, bool, error) {
	if err := t.usable(false); err != nil {
		return nil, false, err
	}
	var out []site.ConfigChange
	b := &pgx.Batch{}
	b.Queue(`SELECT version, kind, name FROM config_log WHERE version > $1::bigint ORDER BY version, kind, name`, since).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c site.ConfigChange
			var kind string
			if err := rows.Scan(&c.Version, &kind, &c.Name); err != nil {
				return err
			}
			c.Kind = site.Kind(kind)
			out = append(out, c)
		}
		return rows.Err()
	})
	if err := t.send(ctx, b, !t.update); err != nil {
		return nil, false, fmt.Errorf("config changes: %w", err)
	}
	version, err := t.ConfigVersion(ctx)
	if err != nil {
		return nil, false, err
	}
	// Every version that moved logged at least one change: the log is
	// complete when it holds each of since+1 .. version.
	versions := int64(0)
	for i, c := range out {
		if c.Version > version {
			out = out[:i] // committed after this transaction's version was read
			break
		}
		if i == 0 || out[i-1].Version != c.Version {
			versions++
		}
	}
	return out, versions == version-since, nil
}

// WatchConfig implements site.ConfigWatcher with PostgreSQL's LISTEN on a
// connection of its own: it calls ready once listening, then changed with
// the version of every configuration change of this site committed by any
// process, until ctx is done (nil) or the connection fails (an
// EUnavailable error).
func (s *Store) WatchConfig(ctx context.Context, ready func(), changed func(version int64)) error {
	pc, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // the pool forgets it; closed below
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.answerTimeout)
		defer cancel()
		conn.Close(ctx)
	}()
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return s.watchErr(ctx, err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+configChannel); err != nil {
		return s.watchErr(ctx, err)
	}
	ready()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return s.watchErr(ctx, err)
		}
		sch, v, ok := strings.Cut(n.Payload, " ")
		if !ok || sch != schema {
			continue
		}
		if version, err := strconv.ParseInt(v, 10, 64); err == nil {
			changed(version)
		}
	}
}

func (s *Store) watchErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("%w: watch configuration changes: %s", unavailable("unavailable"), s.scrub(err))
}
