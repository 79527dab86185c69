package sqlitestore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/usher-vdi/usher/internal/site"
)

// changedName records a successful write of the object named name (as
// stored) of a kind that c describes.
func (c collection[T]) changedName(name string) {
	if c.sp.config {
		c.t.logChange(c.sp.kind, name)
	}
}

// logChange records a write of the configuration: Update moves the
// version at commit and logs the object under it.
func (t *tx) logChange(kind site.Kind, name string) {
	t.configChanged = true
	if t.changes == nil {
		t.changes = map[site.ConfigChange]bool{}
	}
	t.changes[site.ConfigChange{Kind: kind, Name: name}] = true
}

// moveVersion moves the configuration version, logs what changed under
// the new version and forgets what is older than site.ConfigLogKeep
// versions.
func (t *tx) moveVersion(ctx context.Context) error {
	keys := slices.SortedFunc(maps.Keys(t.changes), func(a, b site.ConfigChange) int {
		return cmp.Or(strings.Compare(string(a.Kind), string(b.Kind)), strings.Compare(a.Name, b.Name))
	})
	pairs := make([][2]string, len(keys))
	for i, k := range keys {
		pairs[i] = [2]string{string(k.Kind), k.Name}
	}
	list, err := json.Marshal(pairs)
	if err != nil {
		return err
	}
	if _, err := t.exec(ctx, `UPDATE settings SET config_version = config_version + 1 WHERE id = 1`); err != nil {
		return fmt.Errorf("move config version: %w", err)
	}
	if _, err := t.exec(ctx, `INSERT INTO config_log (version, kind, name)
		SELECT s.config_version, c.value ->> 0, c.value ->> 1 FROM settings s, json_each(?1) c WHERE s.id = 1`, string(list)); err != nil {
		return fmt.Errorf("log config changes: %w", err)
	}
	if _, err := t.exec(ctx, `DELETE FROM config_log WHERE version <= (SELECT config_version FROM settings WHERE id = 1) - ?1`, site.ConfigLogKeep); err != nil {
		return fmt.Errorf("log config changes: %w", err)
	}
	return nil
}

// ConfigChanges reads the change log after since.
func (t *tx) ConfigChanges(ctx context.Context, since int64) ([]site.ConfigChange, bool, error) {
	version, err := t.ConfigVersion(ctx)
	if err != nil {
		return nil, false, err
	}
	rows, err := t.query(ctx, `SELECT version, kind, name FROM config_log WHERE version > ?1 AND version <= ?2 ORDER BY version, kind, name`, since, version)
	if err != nil {
		return nil, false, fmt.Errorf("config changes: %w", err)
	}
	defer rows.Close()
	var out []site.ConfigChange
	versions := int64(0)
	for rows.Next() {
		var c site.ConfigChange
		if err := rows.Scan(&c.Version, &c.Kind, &c.Name); err != nil {
			return nil, false, fmt.Errorf("config changes: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Version != c.Version {
			versions++
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("config changes: %w", dbErr(err))
	}
	// Every version that moved logged at least one change: the log is
	// complete when it holds each of since+1 .. version.
	return out, versions == version-since, nil
}
