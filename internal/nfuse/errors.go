package nfuse

import (
	"errors"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// ErrorIds are the NFuse error codes usher answers with.
const (
	ErrorUnspecified            = "unspecified"
	ErrorFailedCredentials      = "failed-credentials"
	ErrorAccountDisabled        = "account-disabled"
	ErrorAccountLockedOut       = "account-locked-out"
	ErrorMustChangeCredentials  = "must-change-credentials"
	ErrorNoAvailableWorkstation = "no-available-workstation"
	ErrorRetryRequired          = "retry-required"
)

// errorID maps an error onto an NFuse ErrorId. An account locked out by
// usher answers failed-credentials (broker.LockedError unwraps to
// ErrBadCredentials), as an unknown one does, so that usher's lock-out
// tells no one which names exist; account-locked-out is only the
// directory's lock of an account, told once the password is right (or
// by the directory itself), as account-disabled and
// must-change-credentials (an expired password) are. Everything without a
// specific ErrorId is unspecified, including a resource that does not
// exist or that the user may not use (broker.ErrNotEntitled): the answer
// must not tell the two apart, and no code of the protocol says "not
// yours".
func errorID(err error) string {
	switch {
	case errors.Is(err, broker.ErrBadCredentials):
		return ErrorFailedCredentials
	case errors.Is(err, broker.ErrAccountDisabled):
		return ErrorAccountDisabled
	case errors.Is(err, broker.ErrDirectoryLocked):
		return ErrorAccountLockedOut
	case errors.Is(err, broker.ErrPasswordExpired):
		return ErrorMustChangeCredentials
	}
	switch site.ErrorCode(err) {
	case site.EOverloaded, site.EUnavailable:
		// The site DB not answering is a moment's: clients retry.
		return ErrorRetryRequired
	case site.ENoCapacity:
		return ErrorNoAvailableWorkstation
	case site.EUnauthorized:
		return ErrorFailedCredentials
	}
	return ErrorUnspecified
}

// clientError reports whether an error that answers unspecified is the
// client's doing rather than a failure of usher's.
func clientError(err error) bool {
	switch {
	case errors.Is(err, errMalformed), errors.Is(err, errUnsupported), errors.Is(err, errNotFound), errors.Is(err, broker.ErrNotEntitled):
		return true
	}
	code := site.ErrorCode(err)
	return code == site.ENotFound || code == site.EInvalid || code == site.EConflict
}

// Internal errors that answer unspecified.
var (
	errMalformed   = errors.New("malformed request")
	errUnsupported = site.Errorf(site.EInvalid, "unsupported request")
	errNotFound    = site.Errorf(site.ENotFound, "no such launch or session")
)
