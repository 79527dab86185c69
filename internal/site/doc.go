// Package site is the domain model of an usher site: zones, catalogs,
// machines (VDAs) and their runtime status and Usage, delivery groups,
// resources (applications and desktops), local users and groups,
// entitlements and sessions, with their validation rules, the application
// Error and its codes, and the Store contract that site databases
// implement.
//
// The package does no I/O and imports only the standard library (no
// database/sql, net/http or wire protocol; a test in broker keeps it so).
// Every other usher package may import it: the broker, the adapters
// (sqlitestore, storetest, siteyaml, api, nfuse, brokerprom) and the
// code that assembles a site.
package site
