package api_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

func TestVDAMachineNames(t *testing.T) {
	f := newFixture(t)
	list := func(t *testing.T, req vdaproto.MachinesRequest) []string {
		t.Helper()
		req.Secret = enrolmentSecret
		r := f.do("POST", vdaproto.PathMachines, req, "none")
		f.want(r, 200, "")
		var resp vdaproto.MachinesResponse
		if err := json.Unmarshal(r.body, &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Machines
	}
	for _, tc := range []struct {
		name        string
		req         vdaproto.MachinesRequest
		n           int
		first, last string
	}{
		{"all", vdaproto.MachinesRequest{}, 57, "assigned-vda-01", "pooled-vda-05"},
		{"catalog", vdaproto.MachinesRequest{Catalog: "rdsh-office"}, 40, "office-vda-01", "office-vda-40"},
		{"delivery group", vdaproto.MachinesRequest{DeliveryGroup: "Engineering Apps"}, 10, "eng-vda-01", "eng-vda-10"},
		{"prefix", vdaproto.MachinesRequest{Prefix: "office-vda"}, 40, "office-vda-01", "office-vda-40"},
		{"prefix and catalog", vdaproto.MachinesRequest{Prefix: "office-vda-1", Catalog: "rdsh-office"}, 10, "office-vda-10", "office-vda-19"},
		{"filters that exclude each other", vdaproto.MachinesRequest{Prefix: "eng", Catalog: "rdsh-office"}, 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := list(t, tc.req)
			if len(got) != tc.n || !slices.IsSorted(got) {
				t.Fatalf("%d machines %v, want %d in name order", len(got), got, tc.n)
			}
			if tc.n > 0 && (got[0] != tc.first || got[len(got)-1] != tc.last) {
				t.Fatalf("machines %s .. %s, want %s .. %s", got[0], got[len(got)-1], tc.first, tc.last)
			}
		})
	}
	t.Run("wrong or missing secret", func(t *testing.T) {
		for _, secret := range []string{"", "guess", enrolmentSecret + "x"} {
			r := f.do("POST", vdaproto.PathMachines, vdaproto.MachinesRequest{Secret: secret}, "none")
			f.want(r, 401, site.EUnauthorized)
			if strings.Contains(string(r.body), "office-vda") {
				t.Fatalf("a refused request got names: %s", r.body)
			}
		}
	})
	t.Run("admin credentials are not the secret", func(t *testing.T) {
		f.want(f.do("POST", vdaproto.PathMachines, vdaproto.MachinesRequest{}), 401, site.EUnauthorized)
	})
	t.Run("unknown catalog or delivery group", func(t *testing.T) {
		f.want(f.do("POST", vdaproto.PathMachines, vdaproto.MachinesRequest{Secret: enrolmentSecret, Catalog: "nope"}, "none"), 404, site.ENotFound)
		f.want(f.do("POST", vdaproto.PathMachines, vdaproto.MachinesRequest{Secret: enrolmentSecret, DeliveryGroup: "nope"}, "none"), 404, site.ENotFound)
	})
}
