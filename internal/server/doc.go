// Package server assembles one broker of an usher site from a Config
// (Open, Run, Close): the site DB (the data directory's embedded SQLite,
// or PostgreSQL for a site of several brokers) behind the Local Host
// Cache and its zone leader (lhc, lhc/peer), the broker and its VDA
// control client, the site's LDAP or AD directory, the REST, admin and
// VDA APIs, the NFuse XML service (over net/http or the hot path), the
// portal and console, the display gateway that splices sessions' desktops
// to the browser (gateway; Config.DisplayMode), Prometheus metrics, TLS, network boot (boot,
// boothttp, the image store) and, on request, the demo site and simulated
// VDAs. It parses no flags: `usher serve`, `usher broker`, `usher bench`
// and tests turn their inputs into a Config and start a site the same
// way.
//
// It assembles the site role only, and opens site DBs for the one-shot
// commands and the benches (OpenStore, ApplySite); the block roles (usher
// stream, target and hostcache) have assemblies of their own
// (internal/streamrole, internal/targetrole, internal/hostcacherole).
// Only cmd/usher and tests import it.
package server
