// Package sqlitestore is the site database on embedded SQLite, the default
// implementation of site.Store.
//
// A Store keeps one write connection, on which every Update runs as a
// BEGIN IMMEDIATE transaction, and a pool of read connections for View:
// in WAL mode readers run beside the writer and each sees one snapshot.
// The schema is migrated at Open.
//
// Only the assembly (internal/server, internal/datadir, cmd/usher) and
// tests (sitetest) open a Store; everything else sees a site.Store. It
// imports the domain (site) and the SQLite driver, which no other package
// imports.
package sqlitestore
