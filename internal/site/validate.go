package site

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/usher-vdi/usher/internal/icon"
)

// MaxNameLen is the longest object name.
const MaxNameLen = 128

// ValidateName checks an object name: 1 to MaxNameLen printable characters,
// no slash or backslash (names appear in URL paths and DOMAIN\user forms),
// no leading or trailing space.
func ValidateName(kind Kind, name string) error {
	switch {
	case name == "":
		return Errorf(EInvalid, "%s name is empty", kind).about(kind, name).At("name")
	case utf8.RuneCountInString(name) > MaxNameLen:
		return Errorf(EInvalid, "%s name %q is longer than %d characters", kind, name, MaxNameLen).about(kind, name).At("name")
	case !utf8.ValidString(name):
		return Errorf(EInvalid, "%s name %q is not valid UTF-8", kind, name).about(kind, name).At("name")
	case strings.TrimSpace(name) != name:
		return Errorf(EInvalid, "%s name %q has leading or trailing space", kind, name).about(kind, name).At("name")
	case strings.ContainsAny(name, `/\`):
		return Errorf(EInvalid, "%s name %q contains a slash", kind, name).about(kind, name).At("name")
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return Errorf(EInvalid, "%s name %q contains a control character", kind, name).about(kind, name).At("name")
		}
	}
	return nil
}

// MaxAddressLen is the longest machine address.
const MaxAddressLen = 255

// ValidateAddress checks where clients reach a machine's display protocol:
// a host name, an IPv4 address or a bracketed IPv6 address, with an
// optional :port, in at most MaxAddressLen ASCII letters, digits and
// ". - _ : [ ] %". Addresses are written as they are into launch files
// (.rdp, .ica), where a line break would add settings of its own, so
// every path that stores or hands out an address checks it: machine
// validation, and the VDA registration and launch handlers.
func ValidateAddress(addr string) error {
	switch {
	case addr == "":
		return Errorf(EInvalid, "address is empty").At("address")
	case len(addr) > MaxAddressLen:
		return Errorf(EInvalid, "address %.40q... is longer than %d characters", addr, MaxAddressLen).At("address")
	}
	for _, r := range addr {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune(".-_:[]%", r):
		case !unicode.IsPrint(r):
			return Errorf(EInvalid, "address %q contains a control character", addr).At("address")
		default:
			return Errorf(EInvalid, "address %q contains %q: only letters, digits and . - _ : [ ] %% may appear", addr, r).At("address")
		}
	}
	return nil
}

// ValidateText checks a free-text field (a display name, a description, a
// command line): valid UTF-8 without control characters (line breaks,
// tabs) or Unicode line and paragraph separators, since such text is
// written into launch files and logs one field a line.
func ValidateText(field, v string) error {
	if !utf8.ValidString(v) {
		return Errorf(EInvalid, "%s %q is not valid UTF-8", field, v).At(field)
	}
	for _, r := range v {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return Errorf(EInvalid, "%s %q contains a control character or line break", field, v).At(field)
		}
	}
	return nil
}

// validateTexts checks free-text fields of an object, given as field
// name, value pairs.
func validateTexts(kind Kind, name string, fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if err := ValidateText(fields[i], fields[i+1]); err != nil {
			return invalid(kind, name, "%s", ErrorMessage(err)).At(fields[i])
		}
	}
	return nil
}

func invalid(kind Kind, name, format string, args ...any) *Error {
	e := Errorf(EInvalid, format, args...)
	e.Message = fmt.Sprintf("%s %q: %s", kind, name, e.Message)
	return e.about(kind, name)
}

// Validate checks the settings.
func (s Settings) Validate() error {
	if strings.TrimSpace(s.Name) == "" {
		return Errorf(EInvalid, "settings: site name is empty").At("name")
	}
	if err := ValidateName("domain", s.Domain); err != nil {
		return Errorf(EInvalid, "settings: %s", ErrorMessage(err)).At("domain")
	}
	if err := ValidateText("site name", s.Name); err != nil {
		return Errorf(EInvalid, "settings: %s", ErrorMessage(err))
	}
	return nil
}

// Validate checks the zone's own fields.
func (z Zone) Validate() error {
	if err := ValidateName(KindZone, z.Name); err != nil {
		return err
	}
	return validateTexts(KindZone, z.Name, "description", z.Description)
}

// Validate checks the catalog's own fields.
func (c Catalog) Validate() error {
	if err := ValidateName(KindCatalog, c.Name); err != nil {
		return err
	}
	switch c.Kind {
	case MultiSession, SingleSessionPooled, SingleSessionAssigned:
	default:
		return invalid(KindCatalog, c.Name, "kind %q is not one of %s, %s, %s", c.Kind, MultiSession, SingleSessionPooled, SingleSessionAssigned).At("kind")
	}
	if c.Zone == "" {
		return invalid(KindCatalog, c.Name, "zone is empty").At("zone")
	}
	return validateTexts(KindCatalog, c.Name, "description", c.Description)
}

// Validate checks the machine's own fields.
func (m Machine) Validate() error {
	if err := ValidateName(KindMachine, m.Name); err != nil {
		return err
	}
	if m.Catalog == "" {
		return invalid(KindMachine, m.Name, "catalog is empty").At("catalog")
	}
	if err := ValidateAddress(m.Address); err != nil {
		return invalid(KindMachine, m.Name, "%s", ErrorMessage(err)).At("address")
	}
	if m.MaxSessions < 0 || m.MaxSessions > 10000 {
		return invalid(KindMachine, m.Name, "max_sessions %d is outside 0..10000", m.MaxSessions).At("max_sessions")
	}
	return nil
}

// Validate checks the delivery group's own fields.
func (g DeliveryGroup) Validate() error {
	if err := ValidateName(KindDeliveryGroup, g.Name); err != nil {
		return err
	}
	if err := validateTexts(KindDeliveryGroup, g.Name, "description", g.Description); err != nil {
		return err
	}
	switch g.Reconnect {
	case ReconnectAlways, ReconnectDisconnectedOnly, ReconnectSameEndpointOnly:
	default:
		return invalid(KindDeliveryGroup, g.Name, "reconnect %q is not one of %s, %s, %s", g.Reconnect, ReconnectAlways, ReconnectDisconnectedOnly, ReconnectSameEndpointOnly).At("reconnect")
	}
	switch g.ZonePreference {
	case ZoneUserLocation, ZoneUserHome, ZoneUserHomeOnly, ZoneApplicationHome, ZoneApplicationHomeOnly:
	default:
		return invalid(KindDeliveryGroup, g.Name, "zone_preference %q is not one of %s, %s, %s, %s, %s", g.ZonePreference,
			ZoneUserLocation, ZoneUserHome, ZoneUserHomeOnly, ZoneApplicationHome, ZoneApplicationHomeOnly).At("zone_preference")
	}
	if (g.ZonePreference == ZoneApplicationHome || g.ZonePreference == ZoneApplicationHomeOnly) && g.HomeZone == "" {
		return invalid(KindDeliveryGroup, g.Name, "zone_preference %s needs a home_zone", g.ZonePreference).At("home_zone")
	}
	if err := dupes(KindDeliveryGroup, g.Name, "catalogs", g.Catalogs); err != nil {
		return err
	}
	r := g.LoadRules
	if r.MaxSessions.Enabled && (r.MaxSessions.Limit < 1 || r.MaxSessions.Limit > 10000) {
		return invalid(KindDeliveryGroup, g.Name, "load_rules.max_sessions.limit %d is outside 1..10000", r.MaxSessions.Limit).At("load_rules.max_sessions.limit")
	}
	if r.CPU.Enabled && (r.CPU.FullPercent < 1 || r.CPU.FullPercent > 100) {
		return invalid(KindDeliveryGroup, g.Name, "load_rules.cpu.full_percent %d is outside 1..100", r.CPU.FullPercent).At("load_rules.cpu.full_percent")
	}
	if r.Memory.Enabled && (r.Memory.FullPercent < 1 || r.Memory.FullPercent > 100) {
		return invalid(KindDeliveryGroup, g.Name, "load_rules.memory.full_percent %d is outside 1..100", r.Memory.FullPercent).At("load_rules.memory.full_percent")
	}
	if r.Memory.BaseLoadMB < 0 {
		return invalid(KindDeliveryGroup, g.Name, "load_rules.memory.base_load_mb %d is negative", r.Memory.BaseLoadMB).At("load_rules.memory.base_load_mb")
	}
	if r.ConcurrentLogons.Enabled && r.ConcurrentLogons.Tolerance < 1 {
		return invalid(KindDeliveryGroup, g.Name, "load_rules.concurrent_logons.tolerance %d is below 1", r.ConcurrentLogons.Tolerance).At("load_rules.concurrent_logons.tolerance")
	}
	return g.SessionTimers.validate(g.Name)
}

// Validate checks the resource's own fields.
func (r Resource) Validate() error {
	kind := r.Kind.objectKind()
	if err := ValidateName(kind, r.Name); err != nil {
		return err
	}
	switch r.Kind {
	case Application:
		if r.CommandLine == "" {
			return invalid(kind, r.Name, "command_line is empty").At("command_line")
		}
	case Desktop:
		if r.CommandLine != "" {
			return invalid(kind, r.Name, "a desktop has no command_line").At("command_line")
		}
	default:
		return Errorf(EInvalid, "resource %q: kind %q is not %s or %s", r.Name, r.Kind, Application, Desktop)
	}
	if r.DisplayName == "" {
		return invalid(kind, r.Name, "display_name is empty").At("display_name")
	}
	if err := validateTexts(kind, r.Name, "display_name", r.DisplayName, "command_line", r.CommandLine,
		"description", r.Description, "folder", r.Folder, "icon", r.Icon); err != nil {
		return err
	}
	if strings.HasPrefix(r.Folder, "/") || strings.HasSuffix(r.Folder, "/") || strings.Contains(r.Folder, "//") {
		return invalid(kind, r.Name, "folder %q must be a path like A/B without leading, trailing or double slashes", r.Folder).At("folder")
	}
	switch {
	case r.Icon == "" || strings.HasPrefix(r.Icon, "builtin:"):
	case strings.HasPrefix(r.Icon, "data:"):
		if err := icon.CheckDataURI(r.Icon); err != nil {
			return invalid(kind, r.Name, "%v", err).At("icon")
		}
	default:
		return invalid(kind, r.Name, "icon must be builtin:NAME or a %s... URI", icon.DataURIPrefix).At("icon")
	}
	return dupes(kind, r.Name, "delivery_groups", r.DeliveryGroups)
}

func (k ResourceKind) objectKind() Kind {
	if k == Desktop {
		return KindDesktop
	}
	return KindApplication
}

// ObjectKind returns the Kind of objects of this resource kind.
func (k ResourceKind) ObjectKind() Kind { return k.objectKind() }

// Validate checks the user's own fields.
func (u User) Validate() error {
	if err := ValidateAccountName(KindUser, u.Name); err != nil {
		return err
	}
	if strings.Contains(u.Name, "@") {
		return invalid(KindUser, u.Name, "a local user name has no @domain part").At("name")
	}
	if err := validateTexts(KindUser, u.Name, "display_name", u.DisplayName); err != nil {
		return err
	}
	if u.PasswordHash != "" && !strings.HasPrefix(u.PasswordHash, "$argon2id$") {
		return invalid(KindUser, u.Name, "password_hash is not an argon2id PHC string").At("password_hash")
	}
	return dupes(KindUser, u.Name, "groups", u.Groups)
}

// Validate checks the group's own fields.
func (g Group) Validate() error {
	if err := ValidateAccountName(KindGroup, g.Name); err != nil {
		return err
	}
	if g.DN != "" {
		if err := validateDN(g.DN); err != nil {
			return invalid(KindGroup, g.Name, "dn %s", err).At("dn")
		}
	}
	return validateTexts(KindGroup, g.Name, "description", g.Description)
}

// Validate checks the entitlement's own fields.
func (e Entitlement) Validate() error {
	if err := ValidateName(KindEntitlement, e.Name); err != nil {
		return err
	}
	if e.DeliveryGroup == "" {
		return invalid(KindEntitlement, e.Name, "delivery_group is empty").At("delivery_group")
	}
	if len(e.Users) == 0 && len(e.Groups) == 0 {
		return invalid(KindEntitlement, e.Name, "names no users and no groups").At("users")
	}
	for _, l := range []struct {
		field string
		names []string
	}{{"resources", e.Resources}, {"users", e.Users}, {"groups", e.Groups}} {
		if err := dupes(KindEntitlement, e.Name, l.field, l.names); err != nil {
			return err
		}
	}
	return nil
}

func dupes(kind Kind, name, field string, list []string) error {
	seen := make(map[string]bool, len(list))
	for _, v := range list {
		if seen[v] {
			return invalid(kind, name, "%s lists %q twice", field, v).At(field)
		}
		seen[v] = true
	}
	return nil
}
