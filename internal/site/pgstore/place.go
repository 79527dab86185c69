package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/usher-vdi/usher/internal/site"
)

var _ site.Placer = (*Store)(nil)

// placeSession calls the place_session function (migrations/0002_place.sql),
// which does what site.PlaceTx does, in the database. Its rows: kind,
// machine, the machine's status (statusCols) and the session gone back to
// (sessionCols).
const placeSession = `SELECT * FROM place_session($1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text,
	$8::timestamptz, $9::timestamptz, $10::timestamptz,
	$11::boolean, $12::text[], $13::text[], $14::text[], $15::text, $16::text[],
	$17::text[], $18::bigint[], $19::bigint[], $20::boolean[])`

// Place seats a launch as site.PlaceTx does, in one round trip: BEGIN, the
// call of place_session and COMMIT go together, and a transaction that
// commits costs nothing more (a statement's first use on a connection
// costs one round trip to prepare it, as elsewhere). The function says in
// what order it takes its locks: a placement holds those of one candidate
// at a time, takes the configuration lock only to assign a machine, and
// deadlocks with no other transaction of the store.
//
// A placement whose connection turns out dead goes again on another only
// when its failure shows that nothing committed; in any case the session's
// ID, which must be new, keeps it from being recorded twice.
func (s *Store) Place(ctx context.Context, p site.Placement) (site.Placed, error) {
	if err := p.Validate(); err != nil {
		return site.Placed{}, err
	}
	if s.closed.Load() {
		return site.Placed{}, errClosed
	}
	if p.Reconnect == nil && len(p.Candidates) == 0 {
		return site.Placed{}, nil // nothing to look at: no round trip, as an Update that runs no statement
	}
	var out site.Placed
	b := &pgx.Batch{}
	b.Queue(placeSession, placeArgs(p)...).Query(func(rows pgx.Rows) error {
		out = site.Placed{} // a placement sent again starts over
		for rows.Next() {
			var kind, machine string
			var st site.MachineStatus
			var sess site.Session
			dest := append([]any{&kind, &machine}, statusDest(&st)...)
			if err := rows.Scan(append(dest, sessionDest(&sess)...)...); err != nil {
				return err
			}
			switch kind {
			case "refused":
				if out.Refused == nil {
					out.Refused = map[string]site.MachineStatus{}
				}
				out.Refused[machine] = st
			case "reconnect":
				out.Reconnect, out.Status = &sess, st
			case "claimed":
				out.Session, out.Status = p.Session, st
				out.Session.Machine = machine
			default:
				return fmt.Errorf("place_session returned a row of kind %q", kind)
			}
		}
		return rows.Err()
	})
	b.QueuedQueries = append(b.QueuedQueries, commitQuery())

	t := &tx{s: s, update: true, commits: true}
	defer t.end()
	if err := t.send(ctx, b, false); err != nil {
		return site.Placed{}, placeErr(p, err)
	}
	return out, nil
}

// placeArgs returns the arguments of placeSession. Empty lists go as
// empty arrays, not NULL, which ANY and ALL would not match.
func placeArgs(p site.Placement) []any {
	s := p.Session
	args := []any{s.ID, s.User, s.Resource, s.DeliveryGroup, string(s.State), s.ClientName, s.ClientAddress,
		timeArg(s.CreatedAt), timeArg(s.UpdatedAt), timeArg(s.EndedAt)}
	r := p.Reconnect
	if r == nil {
		r = &site.ReconnectRule{}
	}
	policies := make([]string, len(r.Policies))
	for i, pol := range r.Policies {
		policies[i] = string(pol)
	}
	args = append(args, p.Reconnect != nil, nonNil(r.Groups), policies, nonNil(r.Resources), r.ClientName, nonNil(r.Skip))
	machines := make([]string, len(p.Candidates))
	limits := make([]int64, len(p.Candidates))
	loads := make([]int64, len(p.Candidates))
	assign := make([]bool, len(p.Candidates))
	for i, c := range p.Candidates {
		machines[i], limits[i], loads[i], assign[i] = c.Machine, int64(c.Limit), int64(c.LoadIndex), c.Assign
	}
	return append(args, machines, limits, loads, assign)
}

func nonNil(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}

// placeErr turns the errors place_session raises into those of the
// Tx calls that site.PlaceTx makes (Machines().Update, Sessions().Create),
// and names the session in the others.
func placeErr(p site.Placement, err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return fmt.Errorf("place session %q: %w", p.Session.ID, err)
	}
	s, machine := p.Session, pg.Detail
	switch pg.Code {
	case "UP002":
		err = site.Errorf(site.EInvalid, "session %q: resource %q does not exist", s.ID, s.Resource)
	case "UP003":
		err = site.Conflict(site.KindSession, s.ID)
	case "UP004":
		return site.MissingRef(site.KindMachine, machine, site.Ref{Field: "assigned_user", Kind: site.KindUser, Name: s.User})
	default:
		return fmt.Errorf("place session %q: %w", s.ID, err)
	}
	return fmt.Errorf("place session on %q: %w", machine, err)
}
