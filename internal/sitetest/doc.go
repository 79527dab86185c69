// Package sitetest builds sites for tests: a SQLite site DB in the test's
// temporary directory holding a configuration (the demo site unless told
// otherwise) with cheap password hashes, an admin account, a broker over
// it and a fake VDA fleet that records what the broker asks of it. Only
// tests import it; it imports the domain, the SQLite store and auth.
//
// The demo site costs a thousand users and a configuration of 400
// applications to apply, so its site DB is built once per test binary and
// copied for each test.
package sitetest
