package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/usher-vdi/usher/internal/site"
)

// recordHeartbeats records a batch of heartbeats in one statement, as
// site.RecordHeartbeatsTx does with a transaction's calls: the statuses
// are locked first, in name order, as every other transaction of the
// store takes them, then the registered ones written.
const recordHeartbeats = `
WITH h AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::double precision[], $5::double precision[],
		$6::bigint[], $7::bigint[], $8::bigint[])
		WITH ORDINALITY AS h(machine, cred, at, cpu, mem, used, total, load, n)
),
lk AS MATERIALIZED (
	SELECT m.machine, m.registration, m.registered_credential FROM machine_status m
	WHERE m.machine IN (SELECT machine FROM h) ORDER BY m.machine FOR UPDATE
),
v AS MATERIALIZED (
	SELECT h.*, CASE WHEN lk.machine IS NULL THEN 'no-machine'
		WHEN lk.registration <> 'registered' OR lk.registered_credential <> h.cred THEN 'not-registered'
		ELSE 'recorded' END AS verdict
	FROM h LEFT JOIN lk ON lk.machine = h.machine
),
u AS (
	UPDATE machine_status m SET last_heartbeat = v.at, cpu_percent = v.cpu, memory_percent = v.mem,
		memory_used_mb = v.used, memory_total_mb = v.total, load_index = v.load
	FROM v WHERE m.machine = v.machine AND v.verdict = 'recorded'
	RETURNING m.machine
)
SELECT n, verdict FROM v ORDER BY n`

// RecordHeartbeats records heartbeats in one round trip: BEGIN, the
// statement and COMMIT pipelined (see recordHeartbeats).
func (s *Store) RecordHeartbeats(ctx context.Context, hbs []site.Heartbeat) ([]site.HeartbeatVerdict, error) {
	if err := site.Heartbeats(hbs).Validate(); err != nil {
		return nil, err
	}
	n := len(hbs)
	machines, creds := make([]string, n), make([]string, n)
	ats := make([]pgtype.Timestamptz, n)
	cpus, mems := make([]float64, n), make([]float64, n)
	used, total, loads := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, h := range hbs {
		machines[i], creds[i] = h.Machine, h.Credential
		ats[i] = pgtype.Timestamptz{Time: h.At, Valid: !h.At.IsZero()}
		cpus[i], mems[i] = h.Usage.CPUPercent, h.Usage.MemoryPercent
		used[i], total[i], loads[i] = int64(h.Usage.MemoryUsedMB), int64(h.Usage.MemoryTotalMB), int64(h.LoadIndex)
	}
	verdicts, err := s.verdicts(ctx, n, recordHeartbeats, machines, creds, ats, cpus, mems, used, total, loads)
	if err != nil {
		return nil, fmt.Errorf("record %d heartbeats: %w", n, err)
	}
	out := make([]site.HeartbeatVerdict, n)
	for i, v := range verdicts {
		out[i] = site.HeartbeatVerdict(v)
	}
	return out, nil
}
