package siteyaml

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/usher-vdi/usher/internal/site"
)

// header opens every encoded file.
const header = `# usher site configuration.
#
# "usher apply -f FILE" makes the site match this file: it creates and
# updates the objects listed here and, with --prune, deletes those it does
# not list (without --prune an apply that would delete refuses).
# "usher export" writes it. Users' password hashes and the directory's
# bind password are left out unless asked for; apply keeps the current
# password of a user, or of the directory, without one.
`

// EncodeOptions change what Encode writes.
type EncodeOptions struct {
	// WithSecrets writes users' password hashes and the directory's bind
	// password. Off by default, because an exported file is often shared,
	// diffed and committed.
	WithSecrets bool
}

// Encode writes c as canonical YAML without secrets (password hashes,
// the directory's bind password): a header
// comment, then the sections in the order of site.Config, each object's
// fields in the order of its type, objects and name lists sorted, empty
// sections left out, two-space indentation. c is not changed.
func Encode(w io.Writer, c *site.Config) error {
	return EncodeWith(w, c, EncodeOptions{})
}

// EncodeWith is Encode with options.
func EncodeWith(w io.Writer, c *site.Config, opts EncodeOptions) error {
	cp := *c // Normalize sorts the top-level lists in place: sort copies
	cp.Zones = slices.Clone(c.Zones)
	cp.Catalogs = slices.Clone(c.Catalogs)
	cp.Groups = slices.Clone(c.Groups)
	cp.Users = slices.Clone(c.Users)
	cp.Machines = slices.Clone(c.Machines)
	cp.DeliveryGroups = slices.Clone(c.DeliveryGroups)
	cp.Applications = slices.Clone(c.Applications)
	cp.Desktops = slices.Clone(c.Desktops)
	cp.Entitlements = slices.Clone(c.Entitlements)
	cp.Targets = slices.Clone(c.Targets)
	cp.Normalize()
	if !opts.WithSecrets {
		for i := range cp.Users {
			cp.Users[i].PasswordHash = ""
		}
		cp.Directory.BindPassword = ""
	}

	var buf bytes.Buffer
	buf.WriteString(header)
	sections := []struct {
		key   string
		value any
		empty bool
	}{
		{"settings", cp.Settings, false},
		{"directory", cp.Directory, cp.Directory.IsZero()},
		{"zones", cp.Zones, len(cp.Zones) == 0},
		{"catalogs", cp.Catalogs, len(cp.Catalogs) == 0},
		{"groups", cp.Groups, len(cp.Groups) == 0},
		{"users", cp.Users, len(cp.Users) == 0},
		{"machines", cp.Machines, len(cp.Machines) == 0},
		{"delivery_groups", cp.DeliveryGroups, len(cp.DeliveryGroups) == 0},
		{"applications", cp.Applications, len(cp.Applications) == 0},
		{"desktops", cp.Desktops, len(cp.Desktops) == 0},
		{"entitlements", cp.Entitlements, len(cp.Entitlements) == 0},
		{"targets", cp.Targets, len(cp.Targets) == 0},
	}
	for _, s := range sections {
		if s.empty {
			continue
		}
		if err := encodeSection(&buf, s.key, s.value); err != nil {
			return fmt.Errorf("encode %s: %w", s.key, err)
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// encodeSection writes one top-level key and its value, after a blank line.
func encodeSection(buf *bytes.Buffer, key string, value any) error {
	var v yaml.Node
	if err := v.Encode(value); err != nil {
		return err
	}
	setStyles(&v)
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, &v,
	}}
	buf.WriteByte('\n')
	enc := yaml.NewEncoder(buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

// maxFlowWidth is the longest list of names written on one line.
const maxFlowWidth = 60

// setStyles writes short lists of scalars, such as a user's groups, in
// flow style (groups: [domain-users, engineering]), and strings with
// Unicode line or paragraph separators double-quoted, the one style in
// which the YAML emitter escapes them instead of letting a reader fold
// them into spaces.
func setStyles(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && strings.ContainsAny(n.Value, "\u0085\u2028\u2029") {
		n.Style = yaml.DoubleQuotedStyle
	}
	if n.Kind == yaml.SequenceNode && len(n.Content) > 0 {
		width := 0
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				width = maxFlowWidth + 1
				break
			}
			width += len(c.Value) + 2
		}
		if width <= maxFlowWidth {
			n.Style = yaml.FlowStyle
		}
	}
	for _, c := range n.Content {
		setStyles(c)
	}
}
