// Package lhc is the Local Host Cache: a site.Store that lets a broker of
// a PostgreSQL site go on brokering when the site DB is down.
//
// Every broker keeps a copy of the site in an SQLite file of its data
// directory (CopyFile): the configuration, the secrets, admins, machine
// credentials, machine statuses and live sessions (not users' portal
// preferences, which read as none in outage mode), rewritten whole at
// every configuration version and every CopyEvery, into a new file that
// replaces the last good one only once complete.
//
// The Store probes the site DB every ProbeInterval; when to change mode is
// the decision of a state machine with no I/O and no clock of its own
// (detector: a probe's time and outcome, and whether an admin forces an
// outage). While the site DB answers, every call goes to it; a probe that
// fails cuts off the calls under way and fails the next ones at once
// (EUnavailable: clients retry), so that none waits out a driver's
// timeout. A site DB that refuses a connection for its connection limit
// (site.ErrConnLimit) answers: that is counted, never an outage. When it
// has not answered for OutageAfter since its last answer (or an admin
// forces an outage), the Store is in outage mode (entering it, which
// takes tens of milliseconds, begins a tenth of OutageAfter or 250 ms
// before, whichever is less): it opens the copy, seeds it with the
// statuses of the machines registered with this broker
// (Broker.OwnStatuses) and the sessions it wrote since the copy was read,
// and serves every call from it. A call to the site DB still under way
// then (entering waits a second for them) brings what it wrote into the
// copy as it ends. Runtime writes (registrations, enrolments, heartbeats,
// sessions) go on; configuration, admin and password changes, secrets,
// users' preferences and new assignments fail with site.ESiteDBUnavailable. Every session written is journaled in the
// same transaction, so the journal survives a restart.
//
// When the site DB has answered for RecoverAfter, the Store writes the
// journaled sessions back (each by its ID, so that writing one twice is
// harmless), then, with outage calls held back, writes what changed
// meanwhile, the statuses of the machines registered with it, empties the
// journal and goes back to the site DB (the sessions of placements whose
// answer was lost as the site DB went, whose users the outage seated
// again, are ended then, counted in Status.EndedAtRecovery and logged);
// the broker then refreshes its
// configuration and asks its VDAs to register again, so that both
// records of sessions agree with the VDAs'. A broker that starts while the
// site DB is down starts in outage mode from its copy; one that starts
// with a journal left by an outage writes it back first.
//
// Brokers of one zone choose one leader in an outage (package peer's
// Leader, which also carries their calls to it); Handover and Learn carry a broker's recent sessions and
// its machines to the leader (after Handover a broker's copy makes no new
// session), and HoldNewSessions makes a broker that replaces a dead leader wait
// for the zone's VDAs before it makes new sessions.
package lhc
