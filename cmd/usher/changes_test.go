package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/datadir"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// changeHistory reads the change history of a data directory's site DB,
// oldest first, one line a record.
func changeHistory(t *testing.T, data string) []string {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), filepath.Join(data, datadir.SiteDBFile), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out []string
	err = st.View(t.Context(), func(tx site.Tx) error {
		p, err := tx.History().List(t.Context(), site.ChangeFilter{}, site.ListOptions{})
		for _, r := range slices.Backward(p.Items) {
			line := fmt.Sprintf("v%d %s %s %s %q", r.Version, r.Actor, r.Op, r.Kind, r.Name)
			if len(r.Fields) > 0 {
				line += " " + strings.Join(r.Fields, ",")
			}
			out = append(out, line)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestApplyRecordsChanges(t *testing.T) {
	data := t.TempDir()
	base := `settings: {name: test, domain: TEST}
zones: [{name: z1, primary: true}]
catalogs: [{name: c1, kind: multi-session, zone: z1}]
machines:
  - name: m1
    catalog: c1
    address: m1.test:3389
`
	if code, out, stderr := run(t, base, "apply", "-f", "-", "--data", data); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, stderr)
	}
	changed := strings.Replace(base, "m1.test:3389", "m1.example:3389", 1) + "  - name: m2\n    catalog: c1\n    address: m2.test:3389\n"
	if code, out, stderr := run(t, changed, "apply", "-f", "-", "--data", data); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, stderr)
	}
	// Nothing is recorded of a dry run, a refused apply or one that
	// changes nothing.
	if code, out, stderr := run(t, base, "apply", "-f", "-", "--data", data, "--dry-run"); code != 0 {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, _ := run(t, changed+"  - name: m3\n    catalog: nope\n    address: m3.test:3389\n", "apply", "-f", "-", "--data", data); code != 1 {
		t.Fatalf("an apply with a missing reference: exit %d", code)
	}
	if code, out, stderr := run(t, changed, "apply", "-f", "-", "--data", data); code != 0 || !strings.Contains(out, "already matches") {
		t.Fatalf("apply again: exit %d\n%s%s", code, out, stderr)
	}
	// usher admin's changes are the CLI's, without the password.
	for _, args := range [][]string{{"add", "bob"}, {"reset-password", "bob"}, {"add", "carol"}, {"remove", "bob"}, {"rotate-secret", "enrolment"}} {
		if code, out, stderr := run(t, "", append(append([]string{"admin"}, args...), "--data", data)...); code != 0 {
			t.Fatalf("admin %s: exit %d\n%s%s", args, code, out, stderr)
		}
	}
	want := []string{
		`v2 apply update settings "" domain,name`,
		`v2 apply create zone "z1"`,
		`v2 apply create catalog "c1"`,
		`v2 apply create machine "m1"`,
		`v3 apply update machine "m1" address`,
		`v3 apply create machine "m2"`,
		`v3 cli create admin "bob"`,
		`v3 cli update admin "bob" password_hash`,
		`v3 cli create admin "carol"`,
		`v3 cli delete admin "bob"`,
		`v4 cli update secret "enrolment"`,
	}
	if got := changeHistory(t, data); !slices.Equal(got, want) {
		t.Fatalf("history =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
