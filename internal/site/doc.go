// Package site is the domain model of an usher site: zones, catalogs,
// machines (VDAs) and their runtime status and Usage, delivery groups,
// resources (applications and desktops), local users and groups,
// entitlements and sessions, with their validation rules, the application
// Error and its codes, and the Store contract that site databases
// implement.
//
// The package does no I/O: it imports no database/sql, net/http, driver
// or wire protocol, only the standard library, golang.org/x/text (the
// Unicode normal forms of names) and two leaf packages of usher's,
// bytesize and icon (TestDomainImportsNoEdges in internal/layout_test.go
// keeps it so). Every other usher package may import it: the broker and
// the Local Host Cache (lhc), the stores (sqlitestore, pgstore,
// storetest), the transports (api, nfuse, lhc/peer, vdacontrol), the
// other adapters (siteyaml, brokerprom, ldapauth, boot), the generators
// and fixtures (demo, sitegen, sitetest), the benches and the code that
// assembles a site (server, cmd/usher).
package site
