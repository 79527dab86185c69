package api

import (
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// buildOpenAPI returns the OpenAPI 3.0 document of routes. Schemas come from
// the Go types the handlers encode and decode, so they cannot drift from
// them; the api tests check the document against the live server.
func buildOpenAPI(routes []Route) ([]byte, error) {
	b := &schemaBuilder{schemas: map[string]any{}}
	paths := map[string]map[string]any{}
	b.ref(reflect.TypeFor[ErrorBody]())
	for _, rt := range routes {
		op := map[string]any{
			"operationId": rt.OperationID,
			"summary":     rt.Summary,
			"tags":        []string{rt.Tag},
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.Pattern, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range rt.Query {
			typ := "string"
			if q.Integer {
				typ = "integer"
			}
			params = append(params, map[string]any{"name": q.Name, "in": "query", "description": q.Description, "schema": map[string]any{"type": typ}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rt.Request != nil {
			op["requestBody"] = map[string]any{"required": true, "content": jsonContent(b.ref(rt.Request))}
		}
		if rt.RawBody != nil {
			content := map[string]any{}
			for _, mt := range rt.RawBody {
				content[mt] = map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}
			}
			op["requestBody"] = map[string]any{"required": true, "content": content}
		}
		ok := map[string]any{"description": http.StatusText(rt.Status)}
		switch {
		case rt.Response != nil && rt.List:
			ok["content"] = jsonContent(b.list(rt.Response))
		case rt.Response != nil:
			ok["content"] = jsonContent(b.ref(rt.Response))
		case rt.Pattern == "/api/openapi.json":
			ok["content"] = jsonContent(map[string]any{"type": "object"})
		}
		responses := map[string]any{strconv.Itoa(rt.Status): ok}
		if rt.Pattern != "/api/openapi.json" {
			responses["default"] = map[string]any{"description": "An error", "content": jsonContent(b.ref(reflect.TypeFor[ErrorBody]()))}
		}
		op["responses"] = responses
		switch rt.Auth {
		case AuthNone:
			op["security"] = []any{}
		case AuthUser:
			op["security"] = []any{map[string]any{"user": []any{}}}
		case AuthVDA:
			op["security"] = []any{map[string]any{"machine": []any{}}}
		}
		if paths[rt.Pattern] == nil {
			paths[rt.Pattern] = map[string]any{}
		}
		paths[rt.Pattern][strings.ToLower(rt.Method)] = op
	}
	doc := map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":       "usher API",
			"version":     "1",
			"description": "The REST API of an usher site: the user API under /api/v1 (log in, enumerate, launch, sessions), the admin API under /api/v1/admin (HTTP basic with an admin account, or an admin bearer token), and the VDA API under /api/v1/vda. Errors are JSON documents with a code and a message.",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": b.schemas,
			"securitySchemes": map[string]any{
				"basic":   map[string]any{"type": "http", "scheme": "basic"},
				"bearer":  map[string]any{"type": "http", "scheme": "bearer", "description": "An admin token from POST /api/v1/admin/tokens."},
				"user":    map[string]any{"type": "http", "scheme": "bearer", "description": "A user token from POST /api/v1/login."},
				"machine": map[string]any{"type": "http", "scheme": "bearer", "description": "A machine credential from POST /api/v1/vda/enrol."},
			},
		},
		"security": []any{map[string]any{"basic": []any{}}, map[string]any{"bearer": []any{}}},
	}
	return json.MarshalIndent(doc, "", "  ")
}

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

func jsonContent(schema any) map[string]any {
	return map[string]any{"application/json": map[string]any{"schema": schema}}
}

type schemaBuilder struct {
	schemas map[string]any
}

func (b *schemaBuilder) list(t reflect.Type) map[string]any {
	return map[string]any{
		"type":     "object",
		"required": []string{"items", "total"},
		"properties": map[string]any{
			"items": map[string]any{"type": "array", "items": b.ref(t)},
			"total": map[string]any{"type": "integer"},
			"next":  map[string]any{"type": "string"},
		},
		"additionalProperties": false,
	}
}

// ref returns a reference to the component schema of a named struct type,
// defining it on first use, or an inline schema for other types.
func (b *schemaBuilder) ref(t reflect.Type) map[string]any {
	if t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]() {
		name := t.Name()
		if _, ok := b.schemas[name]; !ok {
			b.schemas[name] = nil // break cycles
			b.schemas[name] = b.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return b.schema(t)
}

func (b *schemaBuilder) schema(t reflect.Type) map[string]any {
	switch {
	case t == reflect.TypeFor[time.Time]():
		return map[string]any{"type": "string", "format": "date-time"}
	case t == reflect.TypeFor[site.Duration]():
		return map[string]any{"type": "string", "example": "15m",
			"description": `a duration such as "15m", "8h" or "1h30m", in whole seconds; "0" or absent: off`}
	case t.Kind() == reflect.String:
		return map[string]any{"type": "string"}
	case t.Kind() == reflect.Bool:
		return map[string]any{"type": "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return map[string]any{"type": "integer"}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return map[string]any{"type": "number"}
	case t.Kind() == reflect.Slice:
		return map[string]any{"type": "array", "items": b.ref(t.Elem()), "nullable": true}
	case t.Kind() == reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": b.ref(t.Elem())}
	case t.Kind() == reflect.Struct:
		return b.ref(t)
	case t.Kind() == reflect.Pointer: // an optional value
		s := maps.Clone(b.schema(t.Elem()))
		s["nullable"] = true
		return s
	}
	return map[string]any{}
}

func (b *schemaBuilder) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	b.fields(t, props, &required)
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func (b *schemaBuilder) fields(t reflect.Type, props map[string]any, required *[]string) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			b.fields(f.Type, props, required)
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = b.schema(f.Type)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			*required = append(*required, name)
		}
	}
}
