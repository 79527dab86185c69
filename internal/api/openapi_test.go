package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// TestOpenAPIMatchesServer keeps /api/openapi.json true: the document is
// valid OpenAPI 3, every registered route is documented, every documented
// operation is served (not the fallback 404 or a 405), and the live
// answers of every read operation validate against their schemas.
func TestOpenAPIMatchesServer(t *testing.T) {
	f := newFixture(t)
	r := f.do("GET", "/api/openapi.json", nil, "none")
	f.want(r, 200, "")
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(r.body)
	if err != nil {
		t.Fatalf("load document: %v", err)
	}
	ctx := context.Background()
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("document is not valid OpenAPI: %v", err)
	}

	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	registered := map[string]bool{}
	for _, rt := range f.api.Routes() {
		registered[rt.Method+" "+rt.Pattern] = true
		if !documented[rt.Method+" "+rt.Pattern] {
			t.Errorf("route %s %s is not documented", rt.Method, rt.Pattern)
		}
	}
	for op := range documented {
		if !registered[op] {
			t.Errorf("documented operation %s is not registered", op)
		}
	}

	// Every documented operation is served by a real handler.
	fill := strings.NewReplacer("{name}", "no-such-object", "{id}", "no-such-session")
	for op := range documented {
		method, path, _ := strings.Cut(op, " ")
		resp := f.do(method, fill.Replace(path), "{}")
		if resp.status == http.StatusMethodNotAllowed || strings.Contains(resp.errorMessage(), "no such API route") {
			t.Errorf("documented operation %s is not served: %d %s", op, resp.status, resp.body)
		}
	}

	// Live answers of read operations match the schemas.
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"/api/v1/admin/site", "/api/v1/admin/settings",
		"/api/v1/admin/zones", "/api/v1/admin/zones/primary",
		"/api/v1/admin/catalogs", "/api/v1/admin/catalogs/rdsh-office",
		"/api/v1/admin/groups", "/api/v1/admin/users?limit=5", "/api/v1/admin/users/user0001",
		"/api/v1/admin/machines", "/api/v1/admin/machines/office-vda-01",
		"/api/v1/admin/delivery-groups", "/api/v1/admin/delivery-groups/Office%20Apps",
		"/api/v1/admin/applications?limit=3", "/api/v1/admin/desktops",
		"/api/v1/admin/entitlements", "/api/v1/admin/sessions", "/api/v1/admin/admins", "/api/v1/admin/admins/admin",
		"/api/v1/admin/zones/missing",
	} {
		resp := f.do("GET", path, nil)
		req, _ := http.NewRequest("GET", "http://127.0.0.1"+path, nil)
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Errorf("GET %s: no documented route: %v", path, err)
			continue
		}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.status,
			Header: resp.header, Body: io.NopCloser(bytes.NewReader(resp.body)),
			Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
			t.Errorf("GET %s: the answer does not match the document: %v", path, err)
		}
	}
}
