// Package broker is the brokering domain service: the in-memory snapshot
// of the site configuration that enumeration is served from, entitlement
// resolution, load indexes, machine selection, admission control,
// lock-out, and the launch, session and VDA registration flows.
//
// Its API speaks domain types only (site types and its own, such as
// Registration, Heartbeat, SessionEvent and Prepare). It reaches the site
// DB, the VDAs and metrics only through the interfaces it is given:
// site.Store, VDAControl and Observer. It imports site and auth and no
// driver, transport, metrics library or wire protocol; a test keeps it so.
// Adapters at its edges do that work: api and nfuse turn HTTP requests
// into broker calls, vdacontrol reaches VDAs over HTTP, brokerprom reports
// to Prometheus.
//
// Transports, adapters and the code that assembles a site import it.
//
// # Directory identities
//
// A site's users come first: a name that is one of theirs is theirs. A
// directory user (Config.OpenDirectory) is named as the directory spells
// its entry, and never shares a site user's name: a logon, a token, a
// portal cookie or an admin's basic credentials that resolve to a
// directory entry whose name has a site user's key (auth.NameKey:
// Unicode NFKC, case-folded, spaces trimmed and collapsed) is refused as a
// wrong password, whatever form was typed (user, DOMAIN\user, user@suffix,
// NFuse's Domain element), and logged; so is an entry read before a site
// user of its name was added. The site user is untouched. Entitlements,
// sessions, preferences, tokens and tickets, all keyed by the user's name,
// are thus never reached by a directory user in a site user's name.
//
// All the logons that reach one directory entry share one lock-out count
// and one verified-password cache entry, keyed by auth.NameKey of the name
// looked up; the directory refuses an entry whose name has another key
// (its matching rule then differs from usher's normalisation), so that the
// key is the entry's. Every refused logon costs one argon2id computation
// under the site's parameters, a directory's as a site user's, so that
// response time does not tell which names exist.
package broker
