// Package datadir is a broker's data directory: the embedded site DB, the
// lock that keeps two servers off one site DB, the key that signs bearer
// tokens and the secret VDAs enrol with. It is an adapter at the edge
// (files, flock, the SQLite store); commands and internal/server use it,
// domain packages never do.
package datadir
