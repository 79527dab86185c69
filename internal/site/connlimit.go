package site

import "errors"

// ErrConnLimit is in the chain of an error of a store whose database
// refused a connection for being at its connection limit (PostgreSQL's
// max_connections, or a role's or database's CONNECTION LIMIT: SQLSTATE
// 53300). The database answers, and is busy: a caller that tells a lost
// database from a busy one (the Local Host Cache's outage detection) takes
// it for one that answers, never for an outage. The error also carries
// EUnavailable, so that a client is told to retry shortly.
var ErrConnLimit = errors.New("site DB at its connection limit")
