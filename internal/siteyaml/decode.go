package siteyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/usher-vdi/usher/internal/site"
)

// topLevelKeys are the keys of a site file, in the order Encode writes them.
var topLevelKeys = []string{
	"settings", "directory", "zones", "catalogs", "groups", "users", "machines",
	"delivery_groups", "applications", "desktops", "entitlements", "targets",
}

// maxExpansion bounds the nodes that decoding visits beyond those the file
// holds, so that aliases cannot make a small file expensive to decode.
const maxExpansion = 1 << 20

// Decode reads a site file. filename names it in error messages. Every
// problem is an *Error naming the file and, where there is one, the line.
//
// Omitted settings and delivery-group fields take the domain's defaults
// (site.DefaultSettings, site.NewDeliveryGroup), field by field, so a
// delivery group that sets only load_rules.max_sessions.limit keeps the
// other default load rules. The configuration is normalized but not
// validated.
func Decode(filename string, r io.Reader) (*Document, error) {
	d := &decoder{file: filename, doc: &Document{
		File:    filename,
		Config:  &site.Config{Settings: site.DefaultSettings()},
		objects: map[objectKey][]int{},
		keys:    map[string]int{},
	}}
	root, err := d.parse(r)
	if err != nil {
		return nil, err
	}
	d.budget = countNodes(root) + maxExpansion
	if err := d.config(root); err != nil {
		return nil, err
	}
	d.doc.Config.Normalize()
	return d.doc, nil
}

type decoder struct {
	file   string
	doc    *Document
	budget int // nodes left to visit
}

// parse reads exactly one YAML document and returns its root node.
func (d *decoder) parse(r io.Reader) (root *yaml.Node, err error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, &Error{File: d.file, Err: fmt.Errorf("read: %w", err)}
	}
	defer func() {
		// The YAML parser is third-party code fed untrusted input: a bug
		// in it must fail this file, not the process.
		if v := recover(); v != nil {
			root, err = nil, d.errorf(0, "cannot parse YAML: %v", v)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			what := "is empty"
			if len(bytes.TrimSpace(data)) > 0 {
				what = "holds only comments"
			}
			return nil, d.errorf(0, "the file %s; want a mapping with any of %s", what, strings.Join(topLevelKeys, ", "))
		}
		return nil, d.yamlError(err, data)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, d.errorf(next.Line, "a second YAML document; a site file holds one")
	case !errors.Is(err, io.EOF):
		return nil, d.yamlError(err, data)
	}
	if len(doc.Content) != 1 {
		return nil, d.errorf(doc.Line, "the document is empty")
	}
	return doc.Content[0], nil
}

var (
	yamlLine      = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	unknownAnchor = regexp.MustCompile(`^yaml: unknown anchor '(.*)' referenced$`)
)

// yamlError turns an error of the YAML parser into an *Error with its line.
func (d *decoder) yamlError(err error, data []byte) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return d.errorf(line, "invalid YAML: %s", m[2])
	}
	if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
		// The parser does not say where; the first use of the alias is
		// the best guess.
		return d.errorf(aliasLine(data, m[1]), "invalid YAML: alias *%s refers to no anchor &%s defined before it", m[1], m[1])
	}
	return d.errorf(0, "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}

// aliasLine returns the first line where *name appears as an alias, or 0.
func aliasLine(data []byte, name string) int {
	for i, line := range bytes.Split(data, []byte("\n")) {
		rest := line
		for {
			j := bytes.Index(rest, []byte("*"+name))
			if j < 0 {
				break
			}
			rest = rest[j+1+len(name):]
			if len(rest) == 0 || bytes.ContainsRune([]byte(" \t\r,]}"), rune(rest[0])) {
				return i + 1
			}
		}
	}
	return 0
}

func (d *decoder) errorf(line int, format string, args ...any) *Error {
	return &Error{File: d.file, Line: line, Err: site.Errorf(site.EInvalid, format, args...)}
}

// countNodes counts the nodes of the tree without following aliases.
func countNodes(n *yaml.Node) int {
	c := 1
	for _, sub := range n.Content {
		c += countNodes(sub)
	}
	return c
}

// resolve follows an alias and charges the visit to the budget.
func (d *decoder) resolve(n *yaml.Node) (*yaml.Node, error) {
	d.budget--
	if d.budget < 0 {
		return nil, d.errorf(n.Line, "aliases expand the document by more than %d nodes", maxExpansion)
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias, nil
	}
	return n, nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// where says what a value belongs to in error messages: an object
// (`machine "vda-01"`, "settings"; "" at the top level) and the dotted
// path of the field within it.
type where struct {
	obj  string
	path string
}

func (w where) field(name string) where {
	if w.path != "" {
		name = w.path + "." + name
	}
	return where{w.obj, name}
}

func (w where) index(i int) where {
	return where{w.obj, fmt.Sprintf("%s[%d]", w.path, i)}
}

// prefix is what error messages about a value start with.
func (w where) prefix() string {
	switch {
	case w.obj != "" && w.path != "":
		return w.obj + ": " + w.path + ": "
	case w.obj != "":
		return w.obj + ": "
	case w.path != "":
		return w.path + ": "
	}
	return ""
}

// in names the mapping a key belongs to: `machine "vda-01"` or
// `load_rules.cpu of delivery-group "x"`.
func (w where) in() string {
	switch {
	case w.path == "":
		return w.obj
	case w.obj == "":
		return w.path
	}
	return w.path + " of " + w.obj
}

// describe names a node's value for "cannot use X as Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return strconv.Quote(n.Value)
	}
	return "a YAML node"
}

func (d *decoder) typeError(n *yaml.Node, w where, want string) error {
	return d.errorf(n.Line, "%scannot use %s as %s", w.prefix(), describe(n), want)
}

// config decodes the top-level mapping.
func (d *decoder) config(root *yaml.Node) error {
	root, err := d.resolve(root)
	if err != nil {
		return err
	}
	if isNull(root) {
		return d.errorf(root.Line, "the document is empty; want a mapping with any of %s", strings.Join(topLevelKeys, ", "))
	}
	if root.Kind != yaml.MappingNode {
		return d.errorf(root.Line, "cannot use %s as a site configuration; want a mapping with any of %s", describe(root), strings.Join(topLevelKeys, ", "))
	}
	c := d.doc.Config
	return d.mapping(root, where{}, func(key string, k, v *yaml.Node) (bool, error) {
		d.doc.keys[key] = k.Line
		w := where{path: key}
		switch key {
		case "settings":
			return true, d.value(v, reflect.ValueOf(&c.Settings).Elem(), where{obj: "settings"})
		case "directory":
			return true, d.value(v, reflect.ValueOf(&c.Directory).Elem(), where{obj: "directory"})
		case "zones":
			return true, list(d, v, w, site.KindZone, &c.Zones, func() site.Zone { return site.Zone{} })
		case "catalogs":
			return true, list(d, v, w, site.KindCatalog, &c.Catalogs, func() site.Catalog { return site.Catalog{} })
		case "groups":
			return true, list(d, v, w, site.KindGroup, &c.Groups, func() site.Group { return site.Group{} })
		case "users":
			return true, list(d, v, w, site.KindUser, &c.Users, func() site.User { return site.User{} })
		case "machines":
			return true, list(d, v, w, site.KindMachine, &c.Machines, func() site.Machine { return site.Machine{} })
		case "delivery_groups":
			return true, list(d, v, w, site.KindDeliveryGroup, &c.DeliveryGroups, func() site.DeliveryGroup { return site.NewDeliveryGroup("") })
		case "applications":
			return true, list(d, v, w, site.KindApplication, &c.Applications, func() site.Resource { return site.Resource{Kind: site.Application} })
		case "desktops":
			return true, list(d, v, w, site.KindDesktop, &c.Desktops, func() site.Resource { return site.Resource{Kind: site.Desktop} })
		case "entitlements":
			return true, list(d, v, w, site.KindEntitlement, &c.Entitlements, func() site.Entitlement { return site.Entitlement{} })
		case "targets":
			return true, list(d, v, w, site.KindTarget, &c.Targets, func() site.Target { return site.Target{} })
		}
		return false, nil
	}, topLevelKeys)
}

// mapping walks the key/value pairs of a mapping node, rejecting
// non-string, merge and duplicate keys; field decodes one pair and reports
// whether it knew the key. known lists the keys for the error about an
// unknown one.
func (d *decoder) mapping(n *yaml.Node, w where, field func(key string, k, v *yaml.Node) (bool, error), known []string) error {
	in := " in " + w.in()
	if w.in() == "" {
		in = " at the top level"
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := d.resolve(n.Content[i])
		if err != nil {
			return err
		}
		if k.Kind != yaml.ScalarNode {
			return d.errorf(k.Line, "%scannot use %s as a key; keys are field names", w.prefix(), describe(k))
		}
		if k.ShortTag() == "!!merge" {
			return d.errorf(k.Line, "%smerge keys (<<) are not supported", w.prefix())
		}
		key := k.Value
		if first, dup := seen[key]; dup {
			return d.errorf(k.Line, "duplicate key %q%s (first at line %d)", key, in, first)
		}
		seen[key] = k.Line
		ok, err := field(key, k, n.Content[i+1])
		if err != nil {
			return err
		}
		if !ok {
			msg := fmt.Sprintf("unknown field %q%s (known fields: %s)", key, in, strings.Join(known, ", "))
			if s := suggest(key, known); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			return d.errorf(k.Line, "%s", msg)
		}
	}
	return nil
}

// suggest returns the known field that key most likely misspells: the same
// letters, ignoring case, underscores and dashes.
func suggest(key string, known []string) string {
	squash := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(s))
	}
	for _, k := range known {
		if squash(k) == squash(key) {
			return k
		}
	}
	return ""
}

// list decodes a top-level list of objects of one kind, each onto a fresh
// value from prefill, and records where each is defined.
func list[T any](d *decoder, n *yaml.Node, w where, kind site.Kind, out *[]T, prefill func() T) error {
	n, err := d.resolve(n)
	if err != nil {
		return err
	}
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return d.typeError(n, w, "a list of "+strings.ReplaceAll(string(kind), "-", " ")+"s")
	}
	items := make([]T, 0, len(n.Content))
	for i, raw := range n.Content {
		item, err := d.resolve(raw)
		if err != nil {
			return err
		}
		name, named := d.peekName(item)
		label := fmt.Sprintf("%s #%d", kind, i+1)
		if named {
			label = fmt.Sprintf("%s %q", kind, name)
		}
		if item.Kind != yaml.MappingNode {
			return d.errorf(item.Line, "%s: cannot use %s as %s %s; want a mapping of its fields", label, describe(item), article(kind), kind)
		}
		v := prefill()
		if err := d.value(item, reflect.ValueOf(&v).Elem(), where{obj: label}); err != nil {
			return err
		}
		items = append(items, v)
		key := objectKey{kind, name} // "" for an object without a name
		d.doc.objects[key] = append(d.doc.objects[key], raw.Line)
	}
	if len(items) > 0 { // empty lists are nil, as Normalize makes string lists
		*out = items
	}
	return nil
}

// peekName returns the object's name from its mapping, before decoding the
// rest, so that errors about earlier fields can name it.
func (d *decoder) peekName(n *yaml.Node) (string, bool) {
	if n.Kind != yaml.MappingNode {
		return "", false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if k.Kind == yaml.ScalarNode && k.Value == "name" {
			if v.Kind == yaml.ScalarNode && !isNull(v) {
				return v.Value, true
			}
			return "", false
		}
	}
	return "", false
}

// value decodes n onto v, a struct, string, bool, int, duration, pointer
// to an int or string list of the domain model. Null leaves v as it is, keeping
// defaults.
func (d *decoder) value(n *yaml.Node, v reflect.Value, w where) error {
	n, err := d.resolve(n)
	if err != nil {
		return err
	}
	if isNull(n) {
		return nil
	}
	if v.Type() == reflect.TypeFor[site.Duration]() {
		s, err := d.str(n, w)
		if err != nil {
			return err
		}
		if err := v.Addr().Interface().(*site.Duration).UnmarshalText([]byte(s)); err != nil {
			return d.errorf(n.Line, "%s%v", w.prefix(), err)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return d.typeError(n, w, "a mapping")
		}
		fields := structFields(v.Type())
		return d.mapping(n, w, func(key string, _, val *yaml.Node) (bool, error) {
			for _, f := range fields {
				if f.name == key {
					return true, d.value(val, v.Field(f.index), w.field(key))
				}
			}
			return false, nil
		}, fieldNames(fields))
	case reflect.String:
		s, err := d.str(n, w)
		if err != nil {
			return err
		}
		v.SetString(s)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			return d.typeError(n, w, "a boolean (true or false)")
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			return d.typeError(n, w, "a boolean (true or false)")
		}
		v.SetBool(b)
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			return d.typeError(n, w, "an integer")
		}
		var i int64
		if err := n.Decode(&i); err != nil {
			return d.typeError(n, w, "an integer")
		}
		if i < math.MinInt32 || i > math.MaxInt32 {
			return d.errorf(n.Line, "%s%s is out of range", w.prefix(), n.Value)
		}
		v.SetInt(i)
	case reflect.Pointer: // an optional value: set when the file gives one
		p := reflect.New(v.Type().Elem())
		if err := d.value(n, p.Elem(), w); err != nil {
			return err
		}
		v.Set(p)
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.String {
			panic(fmt.Sprintf("siteyaml: cannot decode into %s", v.Type())) // the model has no such field
		}
		if n.Kind != yaml.SequenceNode {
			return d.typeError(n, w, "a list of strings")
		}
		list := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			item, err := d.resolve(item)
			if err != nil {
				return err
			}
			s, err := d.str(item, w.index(i))
			if err != nil {
				return err
			}
			list.Index(i).SetString(s)
		}
		v.Set(list)
	default:
		panic(fmt.Sprintf("siteyaml: cannot decode into %s", v.Type())) // the model has no such field
	}
	return nil
}

// str decodes a scalar as a string. Plain scalars that YAML would read as
// numbers, booleans or dates keep their text: `domain: 2024` is "2024".
func (d *decoder) str(n *yaml.Node, w where) (string, error) {
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!str", "!!int", "!!float", "!!bool", "!!timestamp":
			return n.Value, nil
		}
	}
	return "", d.typeError(n, w, "a string")
}

type fieldInfo struct {
	name  string
	index int
}

// structFields lists the YAML fields of a model struct in declaration order.
func structFields(t reflect.Type) []fieldInfo {
	var out []fieldInfo
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, fieldInfo{name, i})
	}
	return out
}

func fieldNames(fs []fieldInfo) []string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return names
}

// article returns "a" or "an" for a kind.
func article(k site.Kind) string {
	if strings.ContainsRune("aeiou", rune(k[0])) {
		return "an"
	}
	return "a"
}
