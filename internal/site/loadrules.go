package site

// LoadRules are a delivery group's load management rules. A machine's load
// index is the highest index of its enabled rules; a machine at MaxLoadIndex
// takes no new session.
type LoadRules struct {
	// MaxSessions: full at Limit sessions per machine.
	MaxSessions MaxSessionsRule `json:"max_sessions" yaml:"max_sessions"`
	// CPU: full at FullPercent CPU usage.
	CPU UsageRule `json:"cpu" yaml:"cpu"`
	// Memory: full at FullPercent memory usage; BaseLoadMB is the memory a
	// machine uses with no session, which counts as no load.
	Memory MemoryRule `json:"memory" yaml:"memory"`
	// ConcurrentLogons: logons in progress a machine tolerates.
	ConcurrentLogons LogonRule `json:"concurrent_logons" yaml:"concurrent_logons"`
}

// MaxSessionsRule caps sessions per machine.
type MaxSessionsRule struct {
	Enabled bool `json:"enabled" yaml:"enabled"`
	Limit   int  `json:"limit" yaml:"limit"`
}

// UsageRule loads a machine in proportion to a usage percentage.
type UsageRule struct {
	Enabled     bool `json:"enabled" yaml:"enabled"`
	FullPercent int  `json:"full_percent" yaml:"full_percent"`
}

// MemoryRule is a UsageRule with a base load.
type MemoryRule struct {
	Enabled     bool `json:"enabled" yaml:"enabled"`
	FullPercent int  `json:"full_percent" yaml:"full_percent"`
	BaseLoadMB  int  `json:"base_load_mb" yaml:"base_load_mb"`
}

// LogonRule limits logons in progress per machine. A soft limit loads the
// machine so that others are preferred; a hard limit refuses it.
type LogonRule struct {
	Enabled   bool `json:"enabled" yaml:"enabled"`
	Tolerance int  `json:"tolerance" yaml:"tolerance"`
	Hard      bool `json:"hard" yaml:"hard"`
}

// Citrix's load management defaults.
const (
	DefaultMaxSessions     = 250
	DefaultCPUFullPercent  = 90
	DefaultMemFullPercent  = 90
	DefaultMemBaseLoadMB   = 768
	DefaultLogonTolerance  = 2
	DefaultReconnectPolicy = ReconnectAlways
	DefaultZonePreference  = ZoneUserLocation
)

// DefaultLoadRules returns Citrix's default load rules: maximum sessions on
// (250), CPU and memory off (full at 90%, memory base load 768 MB), and a
// soft tolerance of 2 concurrent logons.
func DefaultLoadRules() LoadRules {
	return LoadRules{
		MaxSessions:      MaxSessionsRule{Enabled: true, Limit: DefaultMaxSessions},
		CPU:              UsageRule{FullPercent: DefaultCPUFullPercent},
		Memory:           MemoryRule{FullPercent: DefaultMemFullPercent, BaseLoadMB: DefaultMemBaseLoadMB},
		ConcurrentLogons: LogonRule{Enabled: true, Tolerance: DefaultLogonTolerance},
	}
}

// NewDeliveryGroup returns a delivery group with Citrix's defaults.
func NewDeliveryGroup(name string, catalogs ...string) DeliveryGroup {
	return DeliveryGroup{
		Name:           name,
		Catalogs:       catalogs,
		LoadRules:      DefaultLoadRules(),
		Reconnect:      DefaultReconnectPolicy,
		ZonePreference: DefaultZonePreference,
	}
}
