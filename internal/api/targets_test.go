package api_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/site"
)

func TestAdminTargets(t *testing.T) {
	f := newFixture(t)
	base := "/api/v1/admin/targets"
	version := f.configVersion()

	// A MAC in any form net.ParseMAC reads is stored in lower-case colon
	// form; the cache mode defaults to ram-overflow; an image the image
	// store may not hold is accepted (the boot server refuses its boots).
	r := f.do("POST", base, map[string]any{"name": "pc01", "mac": "52-54-00-AA-BB-01", "image": "not-imported-yet"})
	f.want(r, 201, "")
	var got site.Target
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.MAC != "52:54:00:aa:bb:01" || got.Cache != site.CacheRAMOverflow || got.Version != nil {
		t.Fatalf("created %+v", got)
	}
	r = f.do("PUT", base+"/pc01", map[string]any{"mac": "52:54:00:aa:bb:01", "image": "win11", "version": 0, "cache": "server-disk"})
	f.want(r, 200, "")
	got = site.Target{}
	json.Unmarshal(r.body, &got)
	if got.Version == nil || *got.Version != 0 || got.Cache != site.CacheServerDisk || got.Image != "win11" {
		t.Fatalf("updated %+v", got)
	}
	r = f.do("GET", base, nil)
	f.want(r, 200, "")
	var list api.ListResponse[site.Target]
	json.Unmarshal(r.body, &list)
	if list.Total != 3 { // the demo site's two kiosks and pc01
		t.Errorf("list: %d targets, want 3", list.Total)
	}
	f.want(f.do("DELETE", base+"/pc01", nil), 204, "")
	if v := f.configVersion(); v != version+3 {
		t.Errorf("configuration version %d after create, update, delete from %d", v, version)
	}

	for _, tc := range []struct {
		name   string
		body   any
		status int
		code   string
		field  string
	}{
		{"bad MAC", map[string]any{"name": "x", "mac": "52:54:00:zz:00:01", "image": "w"}, 400, site.EInvalid, "mac"},
		{"EUI-64", map[string]any{"name": "x", "mac": "52:54:00:00:00:01:02:03", "image": "w"}, 400, site.EInvalid, "mac"},
		{"unknown cache mode", map[string]any{"name": "x", "mac": "52:54:00:00:00:09", "image": "w", "cache": "tmpfs"}, 400, site.EInvalid, "cache"},
		{"bad RAM size", map[string]any{"name": "x", "mac": "52:54:00:00:00:09", "image": "w", "ram": "plenty"}, 400, site.EInvalid, "ram"},
		{"RAM for server-disk", map[string]any{"name": "x", "mac": "52:54:00:00:00:09", "image": "w", "cache": "server-disk", "ram": "1GiB"}, 400, site.EInvalid, "ram"},
		{"negative version", map[string]any{"name": "x", "mac": "52:54:00:00:00:09", "image": "w", "version": -2}, 400, site.EInvalid, "version"},
		{"image path", map[string]any{"name": "x", "mac": "52:54:00:00:00:09", "image": "../../etc"}, 400, site.EInvalid, "image"},
		{"duplicate MAC", map[string]any{"name": "x", "mac": "52-54-00-00-01-01", "image": "w"}, 409, site.EConflict, "mac"},
		{"duplicate name", map[string]any{"name": "kiosk-01", "mac": "52:54:00:00:00:09", "image": "w"}, 409, site.EConflict, "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version := f.configVersion()
			r := f.do("POST", base, tc.body)
			f.want(r, tc.status, tc.code)
			if got := r.errorField(); got != tc.field {
				t.Fatalf("error field %q, want %q; body %s", got, tc.field, r.body)
			}
			if v := f.configVersion(); v != version {
				t.Fatalf("a refused request moved the configuration version")
			}
		})
	}
}

func TestAdminBoots(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, rec := range []site.BootRecord{
		{Target: "kiosk-01", MAC: "52:54:00:00:01:01", Image: "kiosk", Version: 2, Cache: site.CacheServerDisk, Step: site.BootScript, Remote: "10.0.2.15:1"},
		{Target: "kiosk-01", MAC: "52:54:00:00:01:01", Image: "kiosk", Version: 2, Cache: site.CacheServerDisk, Step: site.BootKernel, Remote: "10.0.2.15:2"},
		{Target: "kiosk-02", MAC: "52:54:00:00:01:02", Image: "kiosk", Version: 1, Cache: site.CacheRAMOverflow, Step: site.BootScript, Remote: "10.0.2.16:1"},
	} {
		if err := f.store.Update(ctx, func(tx site.Tx) error { return tx.Boots().Record(ctx, rec) }); err != nil {
			t.Fatal(err)
		}
	}
	list := func(query string) api.ListResponse[site.BootRecord] {
		t.Helper()
		r := f.do("GET", "/api/v1/admin/boots"+query, nil)
		f.want(r, 200, "")
		var out api.ListResponse[site.BootRecord]
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if all := list(""); all.Total != 3 || all.Items[0].Target != "kiosk-02" {
		t.Errorf("all boots: %+v", all)
	}
	if one := list("?target=kiosk-01&limit=1"); one.Total != 2 || len(one.Items) != 1 || one.Items[0].Step != site.BootKernel || one.Next == "" {
		t.Errorf("kiosk-01's first page: %+v", one)
	}
	if byMAC := list("?mac=52-54-00-00-01-02"); byMAC.Total != 1 || byMAC.Items[0].Version != 1 {
		t.Errorf("by MAC: %+v", byMAC)
	}
	f.want(f.do("GET", "/api/v1/admin/boots?mac=nope", nil), 400, site.EInvalid)
	f.want(f.do("GET", "/api/v1/admin/boots?after=nope", nil), 400, site.EInvalid)
	f.want(f.do("GET", "/api/v1/admin/boots", nil, "none"), 401, site.EUnauthorized)
}
