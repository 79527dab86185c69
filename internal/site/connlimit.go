package site

import "errors"

// ErrConnLimit is the error of a site DB that refused a connection because
// it is at its connection limit: it answers, and is not down.
var ErrConnLimit = errors.New("site DB at its connection limit")
