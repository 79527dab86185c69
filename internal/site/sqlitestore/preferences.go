package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// preferences are site.UserPreferences on a transaction: one row per
// user, keyed by the user's folded name, the lists as JSON.
type preferences struct{ t *tx }

func (t *tx) Preferences() site.UserPreferences { return preferences{t} }

func (p preferences) Get(ctx context.Context, user string) (site.Preferences, error) {
	key, err := site.PreferencesKey(user)
	if err != nil {
		return site.Preferences{}, err
	}
	var favourites, recent, at string
	err = p.t.scanOne(ctx, `SELECT favourites, recent, updated_at FROM user_preferences WHERE user_key = ?1`,
		[]any{key}, &favourites, &recent, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return site.NoPreferences(), nil
	}
	if err != nil {
		return site.Preferences{}, fmt.Errorf("preferences of %q: %w", user, err)
	}
	updated, err := parseTime(at)
	if err != nil {
		return site.Preferences{}, fmt.Errorf("preferences of %q: %w", user, err)
	}
	out, err := site.DecodePreferences([]byte(favourites), []byte(recent), updated)
	if err != nil {
		return site.Preferences{}, fmt.Errorf("preferences of %q: %w", user, err)
	}
	return out, nil
}

func (p preferences) Put(ctx context.Context, user string, prefs site.Preferences) (site.Preferences, error) {
	if err := p.t.writable(); err != nil {
		return site.Preferences{}, err
	}
	prefs, err := site.PreparePreferences(user, prefs, time.Now())
	if err != nil {
		return site.Preferences{}, err
	}
	favourites, recent, err := prefs.Columns()
	if err != nil {
		return site.Preferences{}, err
	}
	if _, err := p.t.exec(ctx, `INSERT INTO user_preferences (user_key, favourites, recent, updated_at) VALUES (?1, ?2, ?3, ?4)
		ON CONFLICT (user_key) DO UPDATE SET favourites = excluded.favourites, recent = excluded.recent, updated_at = excluded.updated_at`,
		site.FoldName(user), string(favourites), string(recent), timeArg(prefs.UpdatedAt)); err != nil {
		return site.Preferences{}, fmt.Errorf("set preferences of %q: %w", user, err)
	}
	return prefs, nil
}

func (p preferences) Delete(ctx context.Context, user string) error {
	if err := p.t.writable(); err != nil {
		return err
	}
	if _, err := p.t.exec(ctx, `DELETE FROM user_preferences WHERE user_key = ?1`, site.FoldName(user)); err != nil {
		return fmt.Errorf("delete preferences of %q: %w", user, err)
	}
	return nil
}
