package siteyaml_test

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

// MustEncode encodes c with opts.
func MustEncode(tb testing.TB, c *site.Config, opts siteyaml.EncodeOptions) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := siteyaml.EncodeWith(&buf, c, opts); err != nil {
		tb.Fatalf("Encode: %v", err)
	}
	return buf.Bytes()
}

// MustRoundTrip encodes c, decodes the result and returns it.
func MustRoundTrip(tb testing.TB, c *site.Config, opts siteyaml.EncodeOptions) *site.Config {
	tb.Helper()
	data := MustEncode(tb, c, opts)
	doc, err := siteyaml.Decode("encoded.yaml", bytes.NewReader(data))
	if err != nil {
		tb.Fatalf("Decode(Encode(c)): %v\n%s", err, data)
	}
	return doc.Config
}

func TestRoundTripDemoSite(t *testing.T) {
	want := demo.Site()
	want.Normalize()
	got := MustRoundTrip(t, demo.Site(), siteyaml.EncodeOptions{})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decode(Encode(demo.Site())) differs from demo.Site(): got %v, want %v", got, want)
	}
}

// tricky is a configuration with strings that YAML would read as something
// else if written carelessly, and every optional field set.
func tricky() *site.Config {
	hash := "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"
	return &site.Config{
		Settings: site.Settings{Name: "yes", Domain: "0001", TrustXMLRequests: true, AnonymousAppData: true},
		Zones: []site.Zone{
			{Name: "zone: b", Description: "  leading spaces", Primary: true},
			{Name: "null", Description: "multi\nline\n\ttab"},
			{Name: "~", Description: "# not a comment"},
		},
		Catalogs: []site.Catalog{{Name: "1e3", Kind: site.SingleSessionAssigned, Zone: "null", Description: `quotes ' and "`}},
		Groups:   []site.Group{{Name: "[brackets]"}, {Name: "{braces}, comma"}, {Name: "é ünïcødé 日本"}},
		Users: []site.User{
			{Name: "true", DisplayName: "- dash", Disabled: true, Groups: []string{"{braces}, comma", "[brackets]", "é ünïcødé 日本"}, PasswordHash: hash},
			{Name: "2001-12-14", DisplayName: "trailing space "},
		},
		Machines: []site.Machine{{Name: "*alias", Catalog: "1e3", Address: "[::1]:3389", MaxSessions: 1, Maintenance: true, AssignedUser: "true"}},
		DeliveryGroups: []site.DeliveryGroup{{
			Name: "&anchor", Description: "", Catalogs: []string{"1e3"},
			LoadRules: site.LoadRules{
				MaxSessions:      site.MaxSessionsRule{Enabled: false, Limit: 0},
				CPU:              site.UsageRule{Enabled: true, FullPercent: 75},
				Memory:           site.MemoryRule{Enabled: true, FullPercent: 80, BaseLoadMB: 0},
				ConcurrentLogons: site.LogonRule{Enabled: false, Tolerance: 0, Hard: true},
			},
			Reconnect: site.ReconnectSameEndpointOnly, ZonePreference: site.ZoneApplicationHome, HomeZone: "zone: b",
			SessionTimers: site.SessionTimers{IdleDisconnect: site.Duration(15 * time.Minute), MaxSession: site.Duration(90 * time.Minute)},
		}},
		Applications: []site.Resource{{Kind: site.Application, Name: "@app", DisplayName: "%percent", Folder: "A/B", CommandLine: `C:\Program Files\x.exe "%1"`, Icon: "data:image/png;base64,iVBORw0KGgo=", DeliveryGroups: []string{"&anchor"}, Disabled: true}},
		Desktops:     []site.Resource{{Kind: site.Desktop, Name: "!tag", DisplayName: "!tag", DeliveryGroups: []string{"&anchor"}}},
		Entitlements: []site.Entitlement{{Name: "? question", DeliveryGroup: "&anchor", Resources: []string{"@app", "!tag"}, Users: []string{"true"}, Groups: []string{"null"}}},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name   string
		config func() *site.Config
	}{
		{"tricky strings", tricky},
		{"empty", func() *site.Config { return &site.Config{} }},
		{"empty settings", func() *site.Config { return &site.Config{Zones: []site.Zone{{Name: "z"}}} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.config()
			want.Normalize()
			got := MustRoundTrip(t, tt.config(), siteyaml.EncodeOptions{WithSecrets: true})
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip:\n got %+v\nwant %+v\n%s", got, want, MustEncode(t, tt.config(), siteyaml.EncodeOptions{WithSecrets: true}))
			}
		})
	}
}

func TestEncodeOmitsSecrets(t *testing.T) {
	hash := tricky().Users[0].PasswordHash

	if out := MustEncode(t, tricky(), siteyaml.EncodeOptions{}); bytes.Contains(out, []byte("password_hash")) || bytes.Contains(out, []byte(hash)) {
		t.Errorf("Encode wrote a password hash:\n%s", out)
	}
	if out := MustEncode(t, tricky(), siteyaml.EncodeOptions{WithSecrets: true}); !bytes.Contains(out, []byte("password_hash: "+hash)) {
		t.Errorf("EncodeWith(WithSecrets) wrote no password hash:\n%s", out)
	}
	c := tricky()
	var buf bytes.Buffer
	if err := siteyaml.Encode(&buf, c); err != nil {
		t.Fatal(err)
	}
	if c.Users[0].PasswordHash != hash {
		t.Errorf("Encode cleared the caller's password hash")
	}
}

func TestEncodeDoesNotChangeConfig(t *testing.T) {
	c := tricky()
	c.Zones[0], c.Zones[2] = c.Zones[2], c.Zones[0]
	c.Users[0].Groups = []string{"b", "a"}
	c.Applications[0].DisplayName = ""
	before := tricky()
	before.Zones[0], before.Zones[2] = before.Zones[2], before.Zones[0]
	before.Users[0].Groups = []string{"b", "a"}
	before.Applications[0].DisplayName = ""

	MustEncode(t, c, siteyaml.EncodeOptions{})
	if !reflect.DeepEqual(c, before) {
		t.Errorf("Encode changed its argument:\n got %+v\nwant %+v", c, before)
	}
}

func TestEncodeFormat(t *testing.T) {
	c := &site.Config{
		Settings:       site.Settings{Name: "small", Domain: "SMALL"},
		Zones:          []site.Zone{{Name: "primary", Primary: true}},
		Catalogs:       []site.Catalog{{Name: "rdsh", Kind: site.MultiSession, Zone: "primary"}},
		Users:          []site.User{{Name: "bob", Groups: []string{"staff", "admins"}}, {Name: "alice"}},
		DeliveryGroups: []site.DeliveryGroup{site.NewDeliveryGroup("Apps", "rdsh")},
	}
	out := string(MustEncode(t, c, siteyaml.EncodeOptions{}))
	header, body, ok := strings.Cut(out, "\n\n")
	if !ok || !strings.HasPrefix(header, "# usher site configuration.") || !strings.Contains(header, "usher apply -f") {
		t.Errorf("no header comment naming usher apply -f:\n%s", out)
	}
	want := `settings:
  name: small
  domain: SMALL

zones:
  - name: primary
    primary: true

catalogs:
  - name: rdsh
    kind: multi-session
    zone: primary

users:
  - name: alice
  - name: bob
    groups: [admins, staff]

delivery_groups:
  - name: Apps
    catalogs: [rdsh]
    load_rules:
      max_sessions:
        enabled: true
        limit: 250
      cpu:
        enabled: false
        full_percent: 90
      memory:
        enabled: false
        full_percent: 90
        base_load_mb: 768
      concurrent_logons:
        enabled: true
        tolerance: 2
        hard: false
    reconnect: always
    zone_preference: user-location
`
	if body != want {
		t.Errorf("Encode:\n%s\nwant:\n%s", body, want)
	}
}

func BenchmarkEncodeDemoSite(b *testing.B) {
	c := demo.Site()
	for b.Loop() {
		if err := siteyaml.Encode(io.Discard, c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeDemoSite(b *testing.B) {
	data := MustEncode(b, demo.Site(), siteyaml.EncodeOptions{})
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := siteyaml.Decode("site.yaml", bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEncodeSessionTimersAsDurations(t *testing.T) {
	out := string(MustEncode(t, tricky(), siteyaml.EncodeOptions{}))
	if !strings.Contains(out, "    session_timers:\n      idle_disconnect: 15m\n      max_session: 1h30m\n") {
		t.Fatalf("session timers not written as durations:\n%s", out)
	}
}
