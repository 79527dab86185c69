// Package internal_test holds the test of usher's import rules: which
// packages may import which, so that the layering that `go doc
// ./internal/...` describes stays true as the code grows.
package internal_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/usher-vdi/usher/"

type pkg struct {
	ImportPath  string
	Imports     []string
	Deps        []string
	TestImports []string
}

// list returns every package of the module, with its direct imports and
// its transitive dependencies, from the go tool.
func list(t *testing.T) map[string]pkg {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH")
	}
	out, err := exec.Command("go", "list", "-json", module+"...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module)] = p
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

// transport, driver and instrumentation packages that the domain never
// reaches, directly or through another package.
var edges = []string{"net/http", "database/sql", "github.com/prometheus/", "modernc.org/sqlite",
	module + "internal/vdaproto", module + "internal/api", module + "internal/nfuse", module + "internal/server"}

func TestDomainImportsNoEdges(t *testing.T) {
	pkgs := list(t)
	for _, name := range []string{"internal/site", "internal/broker", "internal/block", "internal/demo", "internal/boot"} {
		p, ok := pkgs[name]
		if !ok {
			t.Errorf("package %s is gone: update this test", name)
			continue
		}
		for _, d := range p.Deps {
			for _, e := range edges {
				if d == e || strings.HasPrefix(d, e) && strings.HasSuffix(e, "/") {
					t.Errorf("%s depends on %s, an adapter's concern", name, d)
				}
			}
		}
	}
}

// TestOnlyAdaptersImportDrivers checks that each driver or transport
// library is imported directly only by the adapters that wrap it.
func TestOnlyAdaptersImportDrivers(t *testing.T) {
	allowed := map[string][]string{
		"modernc.org/sqlite":                             {"internal/site/sqlitestore"},
		"github.com/jackc/pgx":                           {"internal/site/pgstore", "internal/pgtest", "internal/pgadmin"},
		"github.com/prometheus/client_golang/prometheus": {"internal/server", "internal/broker/brokerprom", "internal/auth/ldapauth/ldapprom", "internal/block/meter", "internal/block/hostexport", "internal/nbdserve", "internal/streamrole", "internal/targetrole", "internal/hostcacherole", "internal/gateway"},
		"github.com/go-ldap/ldap":                        {"internal/auth/ldapauth"},
		"github.com/diskfs/go-diskfs":                    {"internal/boot/ext4boot"},
		"github.com/Shopify/toxiproxy":                   {"internal/wan"},
		"github.com/rs/zerolog":                          {"internal/wan"},
	}
	for name, p := range list(t) {
		for _, imp := range p.Imports {
			for lib, who := range allowed {
				if strings.HasPrefix(imp, lib) && !slices.Contains(who, name) {
					t.Errorf("%s imports %s; only %v may", name, imp, who)
				}
			}
		}
	}
}

// roles are the packages that assemble the block roles (Config, Open,
// Run, Close), as internal/server assembles the site.
var roles = []string{"internal/streamrole", "internal/targetrole", "internal/hostcacherole"}

// TestNothingImportsTheAssembly checks that internal/server (which
// imports every adapter), the block roles' assemblies, the test-only
// helpers and the runners are leaves: only commands and tests import
// the first three, and the benches the roles and the runners too.
func TestNothingImportsTheAssembly(t *testing.T) {
	for name, p := range list(t) {
		for _, imp := range p.Imports {
			imp = strings.TrimPrefix(imp, module)
			switch {
			case imp == "internal/server" && !strings.HasPrefix(name, "cmd/"):
				t.Errorf("%s imports internal/server; only commands may", name)
			case imp == "internal/hotpath" && name != "internal/server" && name != "internal/nfuse" && name != "internal/api":
				// The server assembles it; the hot handlers call its Defer.
				t.Errorf("%s imports internal/hotpath; only internal/server and the hot handlers may", name)
			case imp == "internal/lhc/peer" && name != "internal/server":
				// The brokers' protocol: the server assembles it.
				t.Errorf("%s imports internal/lhc/peer; only internal/server may", name)
			case testHelper(imp) && !testHelper(name):
				t.Errorf("%s imports %s outside its tests", name, imp)
			case slices.Contains(runners, imp) && !strings.HasPrefix(name, "cmd/") && name != "internal/bench" && !testHelper(name):
				// A runner (a directory server, a VM, a PostgreSQL cluster,
				// a WAN): the benches start them for their experiments as
				// they start nginx or nbdkit, the tests through their
				// ...test packages.
				t.Errorf("%s imports %s; only commands, internal/bench and tests may", name, imp)
			case slices.Contains(roles, imp) && !strings.HasPrefix(name, "cmd/") && name != "internal/blockbench" && name != "internal/bench":
				// A role's assembly, as internal/server is the site's: the
				// binary, the benches and tests open it.
				t.Errorf("%s imports %s; only commands, benches and tests may", name, imp)
			case imp == "internal/nbdserve" && !slices.Contains(roles, name):
				// What the block roles share: they assemble it.
				t.Errorf("%s imports internal/nbdserve; only the role packages %v may", name, roles)
			case strings.HasPrefix(imp, "cmd/"):
				t.Errorf("%s imports the command %s", name, imp)
			}
		}
	}
}

// runners are the packages that start something real for a bench or a
// test (a directory server, a VM, a PostgreSQL cluster, a WAN): the
// benches may import them, the rest of the product may not.
var runners = []string{"internal/dirserver", "internal/vmrun", "internal/pgcluster", "internal/wan"}

// testHelper says whether a package of the module (path relative to it)
// is a test helper: one whose name ends in "test" (pgtest, sitetest,
// storetest, vmruntest, dirservertest, ...), or internal/memnet, an
// in-memory network for synctest bubbles.
func testHelper(name string) bool {
	return strings.HasSuffix(path.Base(name), "test") || name == "internal/memnet"
}

// TestBinaryHasNoTestHarness checks that no command links a test helper
// of the module (testHelper), the standard library's testing package, or
// a test library: the benches of the binary start runners
// (internal/vmrun, internal/dirserver, internal/pgcluster, internal/wan),
// which take no testing.TB.
func TestBinaryHasNoTestHarness(t *testing.T) {
	pkgs := list(t)
	commands := 0
	for name, p := range pkgs {
		if !strings.HasPrefix(name, "cmd/") {
			continue
		}
		commands++
		for _, d := range p.Deps {
			switch {
			case strings.HasPrefix(d, module) && testHelper(strings.TrimPrefix(d, module)):
				t.Errorf("%s depends on the test helper %s", name, d)
			case d == "testing" || strings.HasPrefix(d, "testing/") || strings.HasPrefix(d, "go.uber.org/goleak"):
				t.Errorf("%s depends on %s", name, d)
			}
		}
	}
	if commands == 0 {
		t.Fatal("no command in the module: update this test")
	}
	for _, r := range runners {
		if _, ok := pkgs[r]; !ok {
			t.Errorf("runner %s is gone: update this test", r)
		}
	}
}

// TestCommandAssemblesNothing checks that cmd/usher only turns flags into
// the Configs of internal/server and the role packages: it imports none
// of the adapters and layers they assemble (stores, caches, meters, the
// host's exports, the roles' shared server).
func TestCommandAssemblesNothing(t *testing.T) {
	pkgs := list(t)
	p, ok := pkgs["cmd/usher"]
	if !ok {
		t.Fatal("package cmd/usher is gone: update this test")
	}
	assembled := []string{
		"internal/site/sqlitestore", "internal/site/pgstore",
		"internal/block/writecache", "internal/block/ramcache", "internal/block/hostcache",
		"internal/block/hostexport", "internal/block/meter", "internal/nbdserve",
	}
	for _, a := range assembled {
		if _, ok := pkgs[a]; !ok {
			t.Errorf("package %s is gone: update this test", a)
		}
		if slices.Contains(p.Imports, module+a) {
			t.Errorf("cmd/usher imports %s: its assembly belongs to internal/server or a role package %v", a, roles)
		}
	}
}
