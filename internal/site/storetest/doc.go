// Package storetest is the conformance suite of site.Store: every store
// (sqlitestore, a PostgreSQL store, the local host cache) runs Run from its
// tests and passes it. The suite checks the contracts written in
// internal/site/store.go and nothing specific to one database.
//
// Only tests import this package.
package storetest
