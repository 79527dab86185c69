package site

import (
	"time"
)

// Kind names a kind of object in the site model. Kinds are used in error
// messages, diffs and the admin API.
type Kind string

// The kinds of configuration objects, in dependency order: an object may
// refer only to kinds listed before its own.
const (
	KindZone          Kind = "zone"
	KindCatalog       Kind = "catalog"
	KindGroup         Kind = "group"
	KindUser          Kind = "user"
	KindMachine       Kind = "machine"
	KindDeliveryGroup Kind = "delivery-group"
	KindApplication   Kind = "application"
	KindDesktop       Kind = "desktop"
	KindEntitlement   Kind = "entitlement"
	KindSession       Kind = "session"
	KindAdmin         Kind = "admin"
	KindBroker        Kind = "broker"
)

// Settings are the site-wide settings. There is exactly one Settings per site.
type Settings struct {
	// Name is the site (farm) name that NFuse clients see.
	Name string `json:"name" yaml:"name"`
	// Domain is the NT domain local users belong to ("DEMO" in the demo site).
	Domain string `json:"domain" yaml:"domain"`
	// TrustXMLRequests honours NFuse requests that carry only identities
	// (ID/SID elements) without a password. Off by default.
	TrustXMLRequests bool `json:"trust_xml_requests" yaml:"trust_xml_requests,omitempty"`
	// AnonymousAppData answers an NFuse RequestAppData without credentials
	// with every application, as Citrix does. Off by default: it leaks the
	// application list.
	AnonymousAppData bool `json:"anonymous_app_data" yaml:"anonymous_app_data,omitempty"`
	// ServerDataCredentials answers an NFuse RequestServerData only with
	// valid credentials (a user's password, or an identity when
	// TrustXMLRequests is on). Off by default, as Citrix: anyone who
	// reaches the XML service then reads every machine's name.
	ServerDataCredentials bool `json:"server_data_credentials" yaml:"server_data_credentials,omitempty"`
}

// DefaultSettings are the settings of a new site.
func DefaultSettings() Settings {
	return Settings{Name: "usher", Domain: "USHER"}
}

// Zone is a location with its own brokers and VDAs. One zone is primary: it
// holds the site DB; the others are satellites.
type Zone struct {
	Name        string `json:"name" yaml:"name"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
	Primary     bool   `json:"primary,omitempty" yaml:"primary,omitempty"`
	// PrimaryFallback lets the VDAs of this (satellite) zone register
	// with the primary zone's brokers when none of their own zone's
	// answers. Off by default: a satellite's VDAs stay in their zone.
	PrimaryFallback bool `json:"primary_fallback,omitempty" yaml:"primary_fallback,omitempty"`
}

// CatalogKind says how the machines of a catalog host sessions.
type CatalogKind string

const (
	// MultiSession machines host many users' sessions at once (XenApp, RDSH).
	MultiSession CatalogKind = "multi-session"
	// SingleSessionPooled machines host one session; any free machine will do.
	SingleSessionPooled CatalogKind = "single-session-pooled"
	// SingleSessionAssigned machines each belong to one user, assigned on first launch.
	SingleSessionAssigned CatalogKind = "single-session-assigned"
)

// SingleSession reports whether machines of the kind host one session at a time.
func (k CatalogKind) SingleSession() bool {
	return k == SingleSessionPooled || k == SingleSessionAssigned
}

// Catalog is a set of like machines in one zone.
type Catalog struct {
	Name        string      `json:"name" yaml:"name"`
	Kind        CatalogKind `json:"kind" yaml:"kind"`
	Zone        string      `json:"zone" yaml:"zone"`
	Description string      `json:"description,omitempty" yaml:"description,omitempty"`
}

// Machine is a session host (VDA) as configured. Its runtime state, which
// the VDA reports and which does not move the configuration version, is in
// MachineStatus.
type Machine struct {
	Name    string `json:"name" yaml:"name"`
	Catalog string `json:"catalog" yaml:"catalog"`
	// Address is host:port where clients reach the machine's display protocol.
	Address string `json:"address" yaml:"address"`
	// MaxSessions caps sessions on the machine; 0 means the delivery group's
	// load rules decide alone. Single-session machines always take one.
	MaxSessions int  `json:"max_sessions,omitempty" yaml:"max_sessions,omitempty"`
	Maintenance bool `json:"maintenance,omitempty" yaml:"maintenance,omitempty"`
	// AssignedUser owns a machine of a single-session-assigned catalog.
	AssignedUser string `json:"assigned_user,omitempty" yaml:"assigned_user,omitempty"`
}

// Registration is a machine's registration state with the brokers.
type Registration string

const (
	Unregistered Registration = "unregistered"
	Registered   Registration = "registered"
)

// MachineStatus is the runtime state of a machine: what its VDA registered
// and reports, and the sessions the brokers count on it.
type MachineStatus struct {
	Registration  Registration `json:"registration"`
	LastHeartbeat time.Time    `json:"last_heartbeat,omitzero"`
	// LoadIndex is 0 (idle) to MaxLoadIndex (full, takes no new session).
	LoadIndex int `json:"load_index"`
	// Usage is the machine's load: the brokers keep its session counts,
	// the VDA reports CPU and memory.
	Usage
	// What the VDA registered: the display-protocol address clients reach,
	// the protocol, and where and how the broker reaches the VDA.
	RegisteredAddress string `json:"registered_address,omitempty"`
	Protocol          string `json:"protocol,omitempty"`
	ControlURL        string `json:"control_url,omitempty"`
	ControlToken      string `json:"-"`
	// ControlPin is the fingerprint (hex SHA-256 of the DER) of the
	// certificate the VDA's https control listener shows: brokers send
	// the control token only to a listener that shows it. "" for none.
	ControlPin   string `json:"control_pin,omitempty"`
	AgentVersion string `json:"agent_version,omitempty"`
	// Credential is the ID of the machine credential whose VDA registered:
	// heartbeats and events with another credential are not the
	// registered VDA's.
	Credential string `json:"-"`
	// Conflict describes the last registration refused because another VDA
	// held the machine's live registration, at ConflictAt: two VDAs claim
	// to be the machine, and one of them is not.
	Conflict   string    `json:"registration_conflict,omitempty"`
	ConflictAt time.Time `json:"registration_conflict_at,omitzero"`
}

// MachineCredential is what a site keeps of a machine's credential and
// enrolment. It is neither configuration nor exported.
type MachineCredential struct {
	// ID names the machine's current credential: the machine's tokens
	// carry it and are refused once it changes. "" means no credential is
	// valid (never enrolled, or revoked).
	ID       string    `json:"-"`
	IssuedAt time.Time `json:"issued_at,omitzero"`
	// SecretFingerprint ties a credential enrolled with the site's
	// enrolment secret to that secret: rotating the secret refuses it. ""
	// for a credential enrolled with a machine enrolment token.
	SecretFingerprint string `json:"-"`
	// Bound machines enrol only with a machine enrolment token, never with
	// the site's secret.
	Bound bool `json:"bound"`
	// EnrolmentTokenHash is the hex SHA-256 of the machine's single-use
	// enrolment token, "" when none waits; it expires at
	// EnrolmentTokenExpires.
	EnrolmentTokenHash    string    `json:"-"`
	EnrolmentTokenExpires time.Time `json:"enrolment_token_expires,omitzero"`
}

// Usage is a machine's load: what its VDA reports and what the brokers
// count on it. The broker's load rules turn it into a load index.
type Usage struct {
	// Sessions counts the machine's live sessions, pending ones included;
	// LogonsInProgress the pending ones, whose user has not finished
	// logging on. Brokers keep both.
	Sessions         int     `json:"sessions"`
	LogonsInProgress int     `json:"logons_in_progress"`
	CPUPercent       float64 `json:"cpu_percent"`
	MemoryPercent    float64 `json:"memory_percent"`
	// MemoryUsedMB and MemoryTotalMB let the memory rule apply its base
	// load; 0 when unknown.
	MemoryUsedMB  int `json:"memory_used_mb,omitempty"`
	MemoryTotalMB int `json:"memory_total_mb,omitempty"`
}

// MachineState is a machine with its runtime state, as the admin API shows it.
type MachineState struct {
	Machine
	MachineStatus
}

// MaxLoadIndex is the load index of a full machine.
const MaxLoadIndex = 10000

// ReconnectPolicy says when a launch goes back to the user's existing session.
type ReconnectPolicy string

const (
	// ReconnectAlways reconnects to a disconnected or active session.
	ReconnectAlways ReconnectPolicy = "always"
	// ReconnectDisconnectedOnly reconnects only to disconnected sessions.
	ReconnectDisconnectedOnly ReconnectPolicy = "disconnected-only"
	// ReconnectSameEndpointOnly reconnects to an active session only from the
	// client that started it.
	ReconnectSameEndpointOnly ReconnectPolicy = "same-endpoint-only"
)

// ZonePreference says which zone's machines a delivery group offers a
// launch first. Whatever comes first, the order goes on with the group's
// home zone (the application's home zone), the user's home zone, the
// user's location (the zone of the broker that takes the launch) and
// then any zone; a preference ending in -only stops at its zone instead,
// refusing the launch rather than spilling over, unless that zone is
// unknown (a user without a home zone).
type ZonePreference string

const (
	ZoneUserLocation        ZonePreference = "user-location"
	ZoneUserHome            ZonePreference = "user-home"
	ZoneUserHomeOnly        ZonePreference = "user-home-only"
	ZoneApplicationHome     ZonePreference = "application-home"
	ZoneApplicationHomeOnly ZonePreference = "application-home-only"
)

// Mandatory reports whether the preference refuses other zones.
func (p ZonePreference) Mandatory() bool {
	return p == ZoneUserHomeOnly || p == ZoneApplicationHomeOnly
}

// DeliveryGroup publishes resources on the machines of its catalogs.
type DeliveryGroup struct {
	Name        string          `json:"name" yaml:"name"`
	Description string          `json:"description,omitempty" yaml:"description,omitempty"`
	Catalogs    []string        `json:"catalogs" yaml:"catalogs"`
	LoadRules   LoadRules       `json:"load_rules" yaml:"load_rules"`
	Reconnect   ReconnectPolicy `json:"reconnect" yaml:"reconnect"`
	// ZonePreference orders candidate zones; HomeZone is the home zone of
	// the group's applications and desktops (application-home).
	ZonePreference ZonePreference `json:"zone_preference" yaml:"zone_preference"`
	HomeZone       string         `json:"home_zone,omitempty" yaml:"home_zone,omitempty"`
	// SessionTimers disconnect idle sessions and log off disconnected
	// and long sessions; all are off by default.
	SessionTimers SessionTimers `json:"session_timers,omitzero" yaml:"session_timers,omitempty"`
}

// ResourceKind tells applications from desktops.
type ResourceKind string

const (
	Application ResourceKind = "application"
	Desktop     ResourceKind = "desktop"
)

// Resource is a published application or desktop. Names are unique across
// both kinds, because users launch resources by name.
type Resource struct {
	Kind ResourceKind `json:"-" yaml:"-"`
	// Name is the internal name (NFuse InName); DisplayName is what users see (FName).
	Name        string `json:"name" yaml:"name"`
	DisplayName string `json:"display_name" yaml:"display_name"`
	// Folder is a slash-separated path, "" for the root.
	Folder      string `json:"folder,omitempty" yaml:"folder,omitempty"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
	// CommandLine starts an application on the host; desktops have none.
	CommandLine string `json:"command_line,omitempty" yaml:"command_line,omitempty"`
	// Icon is "builtin:NAME" or a "data:image/png;base64,..." URI.
	Icon           string   `json:"icon,omitempty" yaml:"icon,omitempty"`
	DeliveryGroups []string `json:"delivery_groups" yaml:"delivery_groups"`
	Disabled       bool     `json:"disabled,omitempty" yaml:"disabled,omitempty"`
}

// User is a local user.
type User struct {
	Name        string `json:"name" yaml:"name"`
	DisplayName string `json:"display_name,omitempty" yaml:"display_name,omitempty"`
	Disabled    bool   `json:"disabled,omitempty" yaml:"disabled,omitempty"`
	// HomeZone is where the user's launches go first under a user-home
	// zone preference, "" for none.
	HomeZone string `json:"home_zone,omitempty" yaml:"home_zone,omitempty"`
	// Groups are the groups the user is a member of.
	Groups []string `json:"groups,omitempty" yaml:"groups,omitempty"`
	// PasswordHash is a PHC-format argon2id hash, "" for a user who cannot
	// log on with a password. It never leaves the server through the API.
	PasswordHash string `json:"-" yaml:"password_hash,omitempty"`
	// Directory is set only on a user the broker made from a directory's
	// entry (never stored): what identifies the entry and its password
	// (its DN and when the password last changed). Site users have none.
	Directory string `json:"-" yaml:"-"`
}

// Credential is what a token issued to u is bound to, so that a new
// password revokes it: a site user's password hash, a directory user's
// entry and password-change time.
func (u *User) Credential() string {
	if u.Directory != "" {
		return u.Directory
	}
	return u.PasswordHash
}

// Group is a local group of users.
type Group struct {
	Name        string `json:"name" yaml:"name"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
	// DN, when set, is the directory group this group stands for: a
	// directory user belongs to the group when the directory puts them
	// in the group of that DN (directly or through nesting). Without a
	// DN, a directory group of the same name (its cn, in any case) does.
	DN string `json:"dn,omitempty" yaml:"dn,omitempty"`
}

// Entitlement grants users and groups access to a delivery group, or, when
// Resources is set, to only those resources of it. A user may use a resource
// of a delivery group when an entitlement of the group without Resources
// names the user (directly or through a group) and, if any entitlement of
// the group lists the resource, one of those names the user too.
type Entitlement struct {
	Name          string   `json:"name" yaml:"name"`
	DeliveryGroup string   `json:"delivery_group" yaml:"delivery_group"`
	Resources     []string `json:"resources,omitempty" yaml:"resources,omitempty"`
	Users         []string `json:"users,omitempty" yaml:"users,omitempty"`
	Groups        []string `json:"groups,omitempty" yaml:"groups,omitempty"`
}

// SessionState is the state of a user session.
type SessionState string

const (
	// SessionPending: brokered, the user has not logged on yet.
	SessionPending      SessionState = "pending"
	SessionActive       SessionState = "active"
	SessionDisconnected SessionState = "disconnected"
	SessionLoggedOff    SessionState = "logged-off"
)

// Session is a user's session on a machine.
type Session struct {
	ID            string       `json:"id"`
	User          string       `json:"user"`
	Resource      string       `json:"resource"`
	DeliveryGroup string       `json:"delivery_group"`
	Machine       string       `json:"machine"`
	State         SessionState `json:"state"`
	ClientName    string       `json:"client_name,omitempty"`
	ClientAddress string       `json:"client_address,omitempty"`
	CreatedAt     time.Time    `json:"created_at"`
	UpdatedAt     time.Time    `json:"updated_at"`
	EndedAt       time.Time    `json:"ended_at,omitzero"`
}
