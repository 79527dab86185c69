// Package storetest is the conformance suite of site.Store: every store
// (sqlitestore, pgstore, the Local Host Cache in normal mode) runs Run
// from its tests and passes it; the Local Host Cache in outage mode, a
// copy of a site, runs RunWith with Capabilities.Seed, which runs the
// parts of the contract a copy holds and skips each other part, saying
// why. The suite checks the contracts written in internal/site/store.go
// and nothing specific to one database.
//
// Only tests import this package.
package storetest
