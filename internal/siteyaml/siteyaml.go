package siteyaml

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/usher-vdi/usher/internal/site"
)

// Error is a problem in a site file, located by file name and line.
type Error struct {
	File string
	// Line is 1-based; 0 when the problem has no line (an empty file).
	Line int
	// Err is the problem: a *site.Error with code site.EInvalid for what
	// Decode finds, or the error given to Document.Annotate.
	Err error
}

func (e *Error) Error() string {
	msg := e.Err.Error()
	if se, ok := e.Err.(*site.Error); ok {
		msg = se.Message // the location replaces the code prefix
	}
	switch {
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, msg)
	case e.File != "":
		return e.File + ": " + msg
	}
	return msg
}

// Unwrap returns the underlying problem, so that site.ErrorCode and
// errors.Is see through the location.
func (e *Error) Unwrap() error { return e.Err }

// Document is a decoded site file: the configuration and where each object
// was defined.
type Document struct {
	// File is the name given to Decode, used in error messages.
	File   string
	Config *site.Config

	objects map[objectKey][]int // lines of each definition, in file order
	keys    map[string]int      // line of each top-level key
}

type objectKey struct {
	kind site.Kind
	name string
}

// Line returns the line where the object of the kind and name is defined,
// or 0 if the document does not define it. An object defined twice reports
// its first definition.
func (d *Document) Line(kind site.Kind, name string) int {
	if lines := d.objects[objectKey{kind, name}]; len(lines) > 0 {
		return lines[0]
	}
	return 0
}

// annotatedKinds are the kinds whose objects a site file defines.
var annotatedKinds = []site.Kind{
	site.KindZone, site.KindCatalog, site.KindGroup, site.KindUser, site.KindMachine,
	site.KindDeliveryGroup, site.KindApplication, site.KindDesktop, site.KindEntitlement, site.KindTarget,
}

// Annotate locates an error from site.Config.Validate in the file. When the
// message of the *site.Error in err's chain is about an object the document
// defines (`KIND "NAME": ...`, `KIND "NAME" already exists`, `KIND name
// "NAME" is ...`, `KIND name is empty`) or about a top-level key
// ("settings: ...", "zones: ..."), it returns an *Error with the file and
// line that wraps err, so site.ErrorCode still sees the code. For a name
// defined twice it points at the second definition, the one Validate
// rejects. Otherwise, and for an err already located, it returns err
// unchanged.
func (d *Document) Annotate(err error) error {
	var located *Error
	if err == nil || errors.As(err, &located) {
		return err
	}
	var se *site.Error
	if !errors.As(err, &se) {
		return err
	}
	if line := d.lineOf(se); line > 0 {
		return &Error{File: d.File, Line: line, Err: err}
	}
	return err
}

func (d *Document) lineOf(se *site.Error) int {
	msg := se.Message
	for _, k := range annotatedKinds {
		// KIND "NAME" already exists (a conflict: point at the second
		// definition), or KIND "NAME": ...; names are Go-quoted.
		if rest, ok := strings.CutPrefix(msg, string(k)+" "); ok {
			if q, err := strconv.QuotedPrefix(rest); err == nil {
				if name, err := strconv.Unquote(q); err == nil {
					lines := d.objects[objectKey{k, name}]
					switch after := rest[len(q):]; {
					case after == " already exists" && len(lines) > 0:
						return lines[min(1, len(lines)-1)]
					case strings.HasPrefix(after, ": ") && len(lines) > 0:
						return lines[0]
					}
				}
			}
		}
		// ValidateName: KIND name is empty, KIND name "NAME" is ..., with Go quoting.
		if strings.HasPrefix(msg, string(k)+" name is empty") {
			return d.Line(k, "")
		}
		if rest, ok := strings.CutPrefix(msg, string(k)+" name "); ok {
			if q, err := strconv.QuotedPrefix(rest); err == nil {
				if name, err := strconv.Unquote(q); err == nil {
					if line := d.Line(k, name); line > 0 {
						return line
					}
				}
			}
		}
	}
	for _, key := range topLevelKeys {
		if strings.HasPrefix(msg, key+":") {
			return d.keys[key]
		}
	}
	return 0
}
