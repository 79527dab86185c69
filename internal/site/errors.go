package site

import (
	"errors"
	"fmt"
)

// Error codes shared by every layer. Only a transport (the REST API, the NFuse
// endpoint, the CLI) turns a code into an HTTP status, an NFuse ErrorId or an
// exit status.
const (
	EInvalid      = "invalid"      // the request or the object is malformed
	ENotFound     = "not_found"    // a named object does not exist
	EConflict     = "conflict"     // a name is taken, or a change breaks a reference
	EUnauthorized = "unauthorized" // no or wrong credentials
	EForbidden    = "forbidden"    // authenticated, but not allowed
	EUnavailable  = "unavailable"  // a dependency (the site DB) is down or overloaded
	ENoCapacity   = "no_capacity"  // no machine can take the session
	EOverloaded   = "overloaded"   // too many requests in flight: retry shortly
	EInternal     = "internal"     // a bug or an unexpected failure; details are logged only
	// ESiteDBUnavailable refuses what only the site DB may do (a
	// configuration or password change, a new assignment) while a broker
	// brokers from its local copy (the Local Host Cache).
	ESiteDBUnavailable = "site_db_unavailable"
)

// Error is an application error: a code callers branch on and a message that
// is safe to show to the client that caused it.
type Error struct {
	Code    string
	Message string
	// Field is the object's field at fault, as spelled in JSON and YAML
	// (dotted for a nested one: "load_rules.cpu.full_percent"), so that a
	// form can show the message beside it; empty when no one field is.
	Field string
	// Kind and Name name the object at fault, when the error is about one.
	// A change to one object can break another (an entitlement that names
	// a resource no longer published): Field is the other's then.
	Kind Kind
	Name string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// At sets the field at fault and returns e.
func (e *Error) At(field string) *Error {
	e.Field = field
	return e
}

// about sets the object at fault and returns e.
func (e *Error) about(kind Kind, name string) *Error {
	e.Kind, e.Name = kind, name
	return e
}

// ErrorField returns the field at fault of the first *Error in err's
// chain when that error is about the object kind/name, else "".
// Applications and desktops share their names: a new application named
// as a desktop is the desktop's conflict.
func ErrorField(err error, kind Kind, name string) string {
	var e *Error
	if !errors.As(err, &e) || e.Name != name {
		return ""
	}
	resource := func(k Kind) bool { return k == KindApplication || k == KindDesktop }
	if e.Kind == kind || resource(e.Kind) && resource(kind) {
		return e.Field
	}
	return ""
}

// ErrorCode returns the code of the first *Error in err's chain, EInternal for
// any other non-nil error and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// ErrorMessage returns the client-safe message of the first *Error in err's
// chain, or a generic message for any other error, so internal details never
// reach a client.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// notFound and conflict are shorthands used throughout the domain.
func notFound(kind Kind, name string) *Error {
	return Errorf(ENotFound, "%s %q not found", kind, name)
}

// NotFound returns the ENotFound error for a named object of a kind.
func NotFound(kind Kind, name string) *Error { return notFound(kind, name) }

// ConflictWith returns the EConflict error for a name that collides with
// an existing object's, other: the same name, or for users, groups and
// admins one that differs only in case or Unicode form.
func ConflictWith(kind Kind, name, other string) *Error {
	if other == name {
		return Conflict(kind, name)
	}
	return Errorf(EConflict, "%s %q already exists as %q (names are matched case-insensitively)", kind, name, other).about(kind, name).At("name")
}

// Conflict returns the EConflict error for a name that is already taken.
func Conflict(kind Kind, name string) *Error {
	return Errorf(EConflict, "%s %q already exists", kind, name).about(kind, name).At("name")
}
