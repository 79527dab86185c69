// Package siteyaml reads and writes a whole site configuration
// (site.Config) as YAML: the file that `usher apply -f site.yaml` reads and
// `usher export` writes.
//
// Decoding is strict: unknown fields, values of the wrong type, duplicate
// keys, several documents and empty files are errors that name the file,
// the line and the object. Decode fills in the domain's defaults but does
// not validate; callers run site.Config.Validate and pass its error to
// Document.Annotate to point at the offending line.
//
// Commands (cmd/usher) and tests import it; the domain package does not.
package siteyaml
