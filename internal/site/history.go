package site

import (
	"context"
	"time"
	"unicode/utf8"
)

// ChangeRecord is one entry of a site's change history: one object that a
// change created, updated or deleted, who made the change and when. The
// history tells what the configuration log (Tx.ConfigChanges) does not,
// and reaches further back; it never holds a secret nor a password hash,
// only that one changed.
type ChangeRecord struct {
	// ID orders the history: a record committed later has a greater ID.
	// The store sets it.
	ID int64 `json:"id"`
	// Version is the configuration version the change committed as; for
	// a change that moves no version (an admin account's), the version
	// then current. The store sets it.
	Version int64 `json:"version"`
	// Time is when the change was made, in UTC, to the microsecond; the
	// store sets a zero Time to the time of Record.
	Time time.Time `json:"time"`
	// Actor is who made the change: AdminActor(name) for an admin of the
	// admin API, ActorApply, ActorCLI or ActorSystem.
	Actor string `json:"actor"`
	Op    Op     `json:"op"`
	// Kind is the kind of object: a configuration object's, KindSettings,
	// KindDirectory, KindSecret or KindAdmin.
	Kind Kind `json:"kind"`
	// Name is the object's name as written ("" for the settings).
	Name string `json:"name"`
	// Fields lists, for an update, the paths of the fields it changed
	// (FieldChange.Path: "load_rules.max_sessions.limit",
	// "password_hash", "bind_password"), never their values; empty when
	// not known.
	Fields []string `json:"fields,omitempty"`
}

// Actors of changes made other than by an admin of the admin API.
const (
	// ActorApply is usher apply's.
	ActorApply = "apply"
	// ActorCLI is the usher admin subcommands' that write the site DB
	// directly (admin add, reset-password, remove, rotate-secret).
	ActorCLI = "cli"
	// ActorSystem is usher's own (the demo site it loads).
	ActorSystem = "system"
)

// AdminActor is the actor of a change made by the named admin.
func AdminActor(name string) string { return "admin:" + name }

// The change history keeps at most ChangeHistoryKeep records, none older
// than ChangeHistoryMaxAge: a store forgets the others as it records new
// ones.
const (
	ChangeHistoryKeep   = 100_000
	ChangeHistoryMaxAge = 90 * 24 * time.Hour
)

// maxActorLen bounds a record's actor: an admin's name and a prefix.
const maxActorLen = 300

// Validate checks what a caller of ChangeHistory.Record gives.
func (r ChangeRecord) Validate() error {
	switch {
	case r.Actor == "" || len(r.Actor) > maxActorLen || !utf8.ValidString(r.Actor):
		return Errorf(EInvalid, "change record: actor %q is empty, longer than %d bytes or not UTF-8", r.Actor, maxActorLen)
	case r.Op != OpCreate && r.Op != OpUpdate && r.Op != OpDelete:
		return Errorf(EInvalid, "change record: op %q is not create, update or delete", r.Op)
	case r.Kind == "":
		return Errorf(EInvalid, "change record: kind is missing")
	case !utf8.ValidString(r.Name):
		return Errorf(EInvalid, "change record: name is not UTF-8")
	}
	return nil
}

// PrepareRecords is what a store does first in ChangeHistory.Record: it
// validates every record (none is kept when one fails) and returns them
// with a zero Time set to now, every Time in UTC to the microsecond.
func PrepareRecords(recs []ChangeRecord, now time.Time) ([]ChangeRecord, error) {
	for _, r := range recs {
		if err := r.Validate(); err != nil {
			return nil, err
		}
	}
	out := make([]ChangeRecord, len(recs))
	for i, r := range recs {
		if r.Time.IsZero() {
			r.Time = now
		}
		r.Time = r.Time.UTC().Truncate(time.Microsecond)
		out[i] = r
	}
	return out, nil
}

// ChangeFilter selects change records; zero fields match everything.
type ChangeFilter struct {
	Kind Kind
	// Name matches exactly, as written.
	Name  string
	Actor string
}

// ChangeHistory is a site's change history (see ChangeRecord), kept in
// the site DB.
type ChangeHistory interface {
	// Record appends records to the history in the transaction: they
	// commit with its changes or not at all. The store sets each record's
	// ID and Version and a zero Time; it keeps them in the order given,
	// after every record committed before. EInvalid for a record that
	// fails Validate, and then none is recorded; in a View, the error of
	// a write.
	Record(ctx context.Context, recs ...ChangeRecord) error
	// List returns the records that match f, newest (greatest ID) first,
	// after opts.After (the ID, in decimal, of the last record of the
	// previous page), at most opts.Limit of them (all when 0). Page.Next
	// is the ID of the page's last record when more follow. EInvalid
	// when After is not an ID.
	List(ctx context.Context, f ChangeFilter, opts ListOptions) (Page[ChangeRecord], error)
}

// PlanRecords returns the change records of a plan carried out by actor:
// one per object, the settings first, then the directory, with the paths of the fields each
// update changed.
func PlanRecords(p *Plan, actor string) []ChangeRecord {
	out := make([]ChangeRecord, 0, len(p.Changes)+2)
	if p.Settings != nil {
		out = append(out, ChangeRecord{Actor: actor, Op: OpUpdate, Kind: KindSettings, Fields: fieldPaths(*p.Settings)})
	}
	if p.Directory != nil {
		out = append(out, ChangeRecord{Actor: actor, Op: OpUpdate, Kind: KindDirectory, Fields: fieldPaths(*p.Directory)})
	}
	for _, c := range p.Changes {
		out = append(out, ChangeRecord{Actor: actor, Op: c.Op, Kind: c.Kind, Name: c.Name, Fields: fieldPaths(c.Fields)})
	}
	return out
}

func fieldPaths(fs []FieldChange) []string {
	if len(fs) == 0 {
		return nil
	}
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Path
	}
	return out
}

// RecordPlan records the plan carried out in tx by actor in tx's change
// history (nothing for an empty plan).
func RecordPlan(ctx context.Context, tx Tx, actor string, p *Plan) error {
	if p == nil || p.Empty() {
		return nil
	}
	return tx.History().Record(ctx, PlanRecords(p, actor)...)
}
