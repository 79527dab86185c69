package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/site"
)

// preferences are site.UserPreferences on a transaction: one row per
// user, keyed by the user's folded name, the lists as jsonb. A Put is one
// upsert of the row, so that concurrent Puts of one user never mix.
type preferences struct{ t *tx }

func (t *tx) Preferences() site.UserPreferences { return preferences{t} }

func (p preferences) Get(ctx context.Context, user string) (site.Preferences, error) {
	if err := p.t.usable(false); err != nil {
		return site.Preferences{}, err
	}
	key, err := site.PreferencesKey(user)
	if err != nil {
		return site.Preferences{}, err
	}
	var favourites, recent []byte
	var at time.Time
	found := false
	b := &pgx.Batch{}
	queueOne(b, &found, `SELECT favourites, recent, updated_at FROM user_preferences WHERE user_key = $1::text`,
		[]any{key}, &favourites, &recent, &at)
	if err := p.t.send(ctx, b, false); err != nil {
		return site.Preferences{}, fmt.Errorf("preferences of %q: %w", user, err)
	}
	if !found {
		return site.NoPreferences(), nil
	}
	out, err := site.DecodePreferences(favourites, recent, at)
	if err != nil {
		return site.Preferences{}, fmt.Errorf("preferences of %q: %w", user, err)
	}
	return out, nil
}

func (p preferences) Put(ctx context.Context, user string, prefs site.Preferences) (site.Preferences, error) {
	if err := p.t.usable(true); err != nil {
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
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO user_preferences (user_key, favourites, recent, updated_at)
		VALUES ($1::text, $2::jsonb, $3::jsonb, $4::timestamptz)
		ON CONFLICT (user_key) DO UPDATE SET favourites = excluded.favourites, recent = excluded.recent, updated_at = excluded.updated_at`,
		site.FoldName(user), string(favourites), string(recent), prefs.UpdatedAt)
	p.t.wrote = true
	if err := p.t.send(ctx, b, false); err != nil {
		return site.Preferences{}, fmt.Errorf("set preferences of %q: %w", user, err)
	}
	return prefs, nil
}

func (p preferences) Delete(ctx context.Context, user string) error {
	if err := p.t.usable(true); err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM user_preferences WHERE user_key = $1::text`, site.FoldName(user))
	p.t.wrote = true
	if err := p.t.send(ctx, b, false); err != nil {
		return fmt.Errorf("delete preferences of %q: %w", user, err)
	}
	return nil
}
