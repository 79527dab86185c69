package site

import (
	"context"
	"slices"
	"strings"
	"unicode/utf8"
)

// Kinds of configuration change that are not objects of a list.
const (
	// KindSettings is the change of the site settings (Name is "").
	KindSettings Kind = "settings"
	// KindSecret is the change of a site secret (Name is the secret's).
	KindSecret Kind = "secret"
)

// ConfigChange is one object that a committed configuration change wrote:
// created, updated or deleted (a change log does not say which; the
// object's presence at the version does).
type ConfigChange struct {
	// Version is the configuration version the change committed as.
	Version int64
	Kind    Kind
	// Name is the object's name as the write gave it; account names
	// (users', groups') match it case-insensitively (FoldName).
	Name string
}

// ConfigLogKeep is how many configuration versions a store's change log
// keeps at least (see Tx.ConfigChanges).
const ConfigLogKeep = 1000

// MaxIncrementalChanges is the most changed objects that Refresh reads one
// by one; a larger change (an apply of a whole site) is read whole, which
// then costs fewer round trips.
const MaxIncrementalChanges = 256

// Refresh returns the site's configuration in tx and its version. When
// base, the configuration at baseVersion, is given and the store's change
// log covers every version since (Tx.ConfigChanges), it reads only the
// objects that changed and builds the result from base, which it does not
// modify (the result shares base's unchanged objects, as MutateFrom's
// does): the cost grows with the change, not the site. Otherwise, or for
// more than MaxIncrementalChanges objects, it loads the whole
// configuration. It returns base itself when the version has not moved.
//
// The result is what LoadConfig would read in tx.
func Refresh(ctx context.Context, tx Tx, base *Config, baseVersion int64) (*Config, int64, error) {
	version, err := tx.ConfigVersion(ctx)
	if err != nil {
		return nil, 0, err
	}
	if base != nil && version == baseVersion {
		return base, version, nil
	}
	if base != nil && version > baseVersion {
		changes, complete, err := tx.ConfigChanges(ctx, baseVersion)
		if err != nil {
			return nil, 0, err
		}
		if complete && len(changes) <= MaxIncrementalChanges {
			cfg, err := applyChanges(ctx, tx, base, changes)
			return cfg, version, err
		}
	}
	cfg, err := LoadConfig(ctx, tx)
	return cfg, version, err
}

// applyChanges reads the objects that changes name from tx and puts them
// in (or, when gone, takes them out of) a copy of base.
func applyChanges(ctx context.Context, tx Tx, base *Config, changes []ConfigChange) (*Config, error) {
	c := base.copyLists()
	seen := make(map[ConfigChange]bool, len(changes))
	for _, ch := range changes {
		key := ConfigChange{Kind: ch.Kind, Name: ch.Name}
		if seen[key] {
			continue
		}
		seen[key] = true
		var err error
		switch ch.Kind {
		case KindSettings:
			c.Settings, err = tx.Settings(ctx)
		case KindDirectory:
			c.Directory, err = tx.Directory(ctx)
		case KindSecret: // not configuration
		case KindZone:
			c.Zones, err = reread(ctx, tx.Zones(), c.Zones, ch.Name, zoneName, false)
		case KindCatalog:
			c.Catalogs, err = reread(ctx, tx.Catalogs(), c.Catalogs, ch.Name, catalogName, false)
		case KindGroup:
			c.Groups, err = reread(ctx, tx.Groups(), c.Groups, ch.Name, groupName, true)
		case KindUser:
			c.Users, err = reread(ctx, tx.Users(), c.Users, ch.Name, userName, true)
		case KindMachine:
			c.Machines, err = reread(ctx, tx.Machines(), c.Machines, ch.Name, machineName, false)
		case KindDeliveryGroup:
			c.DeliveryGroups, err = reread(ctx, tx.DeliveryGroups(), c.DeliveryGroups, ch.Name, deliveryGroupName, false)
		case KindApplication, KindDesktop:
			// One namespace: a name may have moved from one list to
			// the other.
			if c.Applications, err = reread(ctx, tx.Applications(), c.Applications, ch.Name, resourceName, false); err == nil {
				c.Desktops, err = reread(ctx, tx.Desktops(), c.Desktops, ch.Name, resourceName, false)
			}
		case KindEntitlement:
			c.Entitlements, err = reread(ctx, tx.Entitlements(), c.Entitlements, ch.Name, entitlementName, false)
		case KindTarget:
			c.Targets, err = reread(ctx, tx.Targets(), c.Targets, ch.Name, targetName, false)
		default:
			return LoadConfig(ctx, tx) // a kind this version does not know
		}
		if err != nil {
			return nil, err
		}
	}
	c.Normalize()
	return c, nil
}

// reread replaces the object named name in list (sorted by name) with its
// current state in col: put in its place, added, or removed when col no
// longer has it. Account names (fold) match case-insensitively. list is
// the caller's own copy; the objects in it are not written.
func reread[T any](ctx context.Context, col Collection[T], list []T, name string, nameOf func(*T) string, fold bool) ([]T, error) {
	obj, err := col.Get(ctx, name)
	found := err == nil
	if err != nil && ErrorCode(err) != ENotFound {
		return nil, err
	}
	if i, ok := slices.BinarySearchFunc(list, name, func(o T, n string) int { return strings.Compare(nameOf(&o), n) }); ok {
		list = slices.Delete(list, i, i+1)
	} else if fold {
		// Another spelling of the account's name: the lists are sorted
		// by name, not by key, so look at every one whose name folds
		// alike (EqualFold first, as FoldName allocates).
		key := FoldName(name)
		list = slices.DeleteFunc(list, func(o T) bool {
			n := nameOf(&o)
			return (strings.EqualFold(n, name) || !isASCII(n)) && FoldName(n) == key
		})
	}
	if !found {
		return list, nil
	}
	i, _ := slices.BinarySearchFunc(list, nameOf(&obj), func(o T, n string) int { return strings.Compare(nameOf(&o), n) })
	return slices.Insert(list, i, obj), nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
