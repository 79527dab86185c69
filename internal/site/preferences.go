package site

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Preferences are one user's own choices in the portal, kept in the site
// DB so that they follow the user from browser to browser: the resources
// the user marked as favourites, and the ones the user launched last.
// They are user data, not configuration: writing them moves no version,
// they are neither exported nor applied, and the change history does not
// record them.
type Preferences struct {
	// Favourites are resource names (applications and desktops), in the
	// user's order, at most MaxFavourites of them, each once.
	Favourites []string `json:"favourites"`
	// Recent are the resources the user launched last, newest first, at
	// most MaxRecent of them, each once.
	Recent []RecentLaunch `json:"recent"`
	// UpdatedAt is when the preferences were last written, in UTC, to the
	// microsecond; zero for a user who never had any written. The store
	// sets it.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// RecentLaunch is one launch among a user's recent ones.
type RecentLaunch struct {
	Resource string    `json:"resource"`
	At       time.Time `json:"at"`
}

// Bounds of a user's Preferences.
const (
	MaxFavourites = 200
	MaxRecent     = 20
)

// Validate checks the preferences' own rules: every name a valid resource
// name and there once, at most MaxFavourites favourites and MaxRecent
// recent launches, each with its time. It does not check that the
// resources exist: one deleted later leaves its name behind.
func (p Preferences) Validate() error {
	if len(p.Favourites) > MaxFavourites {
		return Errorf(EInvalid, "preferences: %d favourites, more than the %d allowed", len(p.Favourites), MaxFavourites).At("favourites")
	}
	seen := make(map[string]bool, len(p.Favourites))
	for i, name := range p.Favourites {
		if err := ValidateName("resource", name); err != nil {
			return Errorf(EInvalid, "preferences: favourite %d: %s", i+1, ErrorMessage(err)).At("favourites")
		}
		if seen[name] {
			return Errorf(EInvalid, "preferences: favourite %q is listed twice", name).At("favourites")
		}
		seen[name] = true
	}
	if len(p.Recent) > MaxRecent {
		return Errorf(EInvalid, "preferences: %d recent launches, more than the %d kept", len(p.Recent), MaxRecent).At("recent")
	}
	clear(seen)
	for i, r := range p.Recent {
		if err := ValidateName("resource", r.Resource); err != nil {
			return Errorf(EInvalid, "preferences: recent launch %d: %s", i+1, ErrorMessage(err)).At("recent")
		}
		if seen[r.Resource] {
			return Errorf(EInvalid, "preferences: recent launch of %q is listed twice", r.Resource).At("recent")
		}
		if r.At.IsZero() {
			return Errorf(EInvalid, "preferences: recent launch of %q has no time", r.Resource).At("recent")
		}
		seen[r.Resource] = true
	}
	return nil
}

// PreparePreferences is what a store does first in UserPreferences.Put:
// it validates p and the user's name and returns p as stored: nil lists
// empty, times in UTC to the microsecond, recent launches newest first,
// UpdatedAt now.
func PreparePreferences(user string, p Preferences, now time.Time) (Preferences, error) {
	if err := ValidateName(KindUser, user); err != nil {
		return Preferences{}, err
	}
	if err := p.Validate(); err != nil {
		return Preferences{}, err
	}
	out := Preferences{Favourites: append([]string{}, p.Favourites...), Recent: make([]RecentLaunch, len(p.Recent)),
		UpdatedAt: now.UTC().Truncate(time.Microsecond)}
	for i, r := range p.Recent {
		out.Recent[i] = RecentLaunch{Resource: r.Resource, At: r.At.UTC().Truncate(time.Microsecond)}
	}
	slices.SortStableFunc(out.Recent, func(a, b RecentLaunch) int { return b.At.Compare(a.At) })
	return out, nil
}

// PreferencesKey is the key a store keeps a user's preferences under:
// the name folded as account names are, once checked by ValidateName.
func PreferencesKey(user string) (string, error) {
	if err := ValidateName(KindUser, user); err != nil {
		return "", err
	}
	return FoldName(user), nil
}

// Columns returns the lists of p (as PreparePreferences returned them) as
// the JSON documents a store keeps.
func (p Preferences) Columns() (favourites, recent []byte, err error) {
	if favourites, err = json.Marshal(p.Favourites); err != nil {
		return nil, nil, err
	}
	if recent, err = json.Marshal(p.Recent); err != nil {
		return nil, nil, err
	}
	return favourites, recent, nil
}

// DecodePreferences returns the preferences a store kept as Columns and
// the time they were written.
func DecodePreferences(favourites, recent []byte, updatedAt time.Time) (Preferences, error) {
	out := NoPreferences()
	if err := json.Unmarshal(favourites, &out.Favourites); err != nil {
		return Preferences{}, fmt.Errorf("favourites: %w", err)
	}
	if err := json.Unmarshal(recent, &out.Recent); err != nil {
		return Preferences{}, fmt.Errorf("recent: %w", err)
	}
	out.UpdatedAt = updatedAt.UTC()
	return out, nil
}

// NoPreferences are the preferences of a user who has none stored.
func NoPreferences() Preferences {
	return Preferences{Favourites: []string{}, Recent: []RecentLaunch{}}
}

// UserPreferences are the site's users' Preferences, by user name. A
// user's name is matched as account names are (FoldName: in any case and
// Unicode form), and needs no user in the site's configuration: a user
// may come from a directory. Deleting a user of the site deletes the
// user's preferences with it, in the same transaction.
type UserPreferences interface {
	// Get returns the user's preferences; a user with none stored (or
	// unknown) gets NoPreferences, never ENotFound. EInvalid for a name
	// that fails ValidateName.
	Get(ctx context.Context, user string) (Preferences, error)
	// Put replaces the user's preferences, whole (PreparePreferences),
	// and returns them as stored. EInvalid when they fail Validate, and
	// then nothing is written; in a View, the error of a write. Of
	// concurrent Puts for one user, the last to commit wins whole: no
	// two are ever mixed.
	Put(ctx context.Context, user string, p Preferences) (Preferences, error)
	// Delete removes the user's preferences; nothing for a user with none.
	Delete(ctx context.Context, user string) error
}
