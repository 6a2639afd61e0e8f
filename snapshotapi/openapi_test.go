package snapshotapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/schema"
	"github.com/jetbus/jetbus/snapshotapi"
)

// ordersSchema is topic orders' schema in the registry: a $ref into $defs, and prefixItems
// (JSON Schema 2020-12, which OpenAPI 3.1 uses and 3.0 does not have).
const ordersSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["status"],
  "properties": {
    "status": {"enum": ["open", "paid", "shipped"]},
    "total": {"type": "number", "minimum": 0},
    "customer": {"$ref": "#/$defs/customer"},
    "lines": {"type": "array", "prefixItems": [{"type": "string"}]}
  },
  "$defs": {"customer": {"type": "object", "properties": {"id": {"type": "string"}}}}
}`

func withSchemas(s snapshotapi.Schemas) apiOpt {
	return func(_ *snapshotapi.Config, d *snapshotapi.Deps) { d.Schemas = s }
}

// TestOpenAPIDocument: /openapi.json is a valid OpenAPI 3.1 document that carries each view's
// fields and, where the topic has one, the registry's schema; kin-openapi validates
// responses against it with JSON Schema 2020-12.
func TestOpenAPIDocument(t *testing.T) {
	ctx := context.Background()
	ns := embeddedtest.NATS(t)
	bus := embeddedtest.Bus(t, ns.ClientURL())
	reg, err := schema.Open(ctx, bus.JetStream())
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close() })
	_, err = reg.Register(ctx, "orders", []byte(ordersSchema))
	require.NoError(t, err)

	a := newAPI(t, false, withSchemas(reg))
	a.put("orders", doc("o1", 3, t0, bson.D{{Key: "status", Value: "paid"}, {Key: "total", Value: 9.5},
		{Key: "customer", Value: bson.D{{Key: "id", Value: "c7"}}}, {Key: "lines", Value: bson.A{"a", int64(2)}}}))
	spec := a.spec() // loads and validates the document as OpenAPI 3.1

	t.Run("the registry's schema, refs moved with it", func(t *testing.T) {
		payload := spec.Components.Schemas["Payload.orders"]
		require.NotNil(t, payload)
		raw, err := json.Marshal(payload.Value)
		require.NoError(t, err)
		assert.NotContains(t, string(raw), `"$schema"`)
		var doc map[string]any
		res, err := http.Get(a.http.URL + "/openapi.json")
		require.NoError(t, err)
		require.NoError(t, json.NewDecoder(res.Body).Decode(&doc))
		res.Body.Close()
		item := doc["components"].(map[string]any)["schemas"].(map[string]any)["View.orders"].(map[string]any)
		props := item["properties"].(map[string]any)
		assert.Equal(t, map[string]any{"enum": []any{"open", "paid", "shipped"}}, props["status"])
		assert.Equal(t, map[string]any{"$ref": "#/components/schemas/Payload.orders/$defs/customer"}, props["customer"])
		assert.Equal(t, map[string]any{"type": []any{"number", "null"}}, props["rank"], "a declared filter without a registry schema")
		assert.Contains(t, props, "_v")
		list := doc["paths"].(map[string]any)["/v1/views/orders"].(map[string]any)["get"].(map[string]any)
		var names []string
		for _, p := range list["parameters"].([]any) {
			if n, ok := p.(map[string]any)["name"].(string); ok {
				names = append(names, n)
			}
		}
		assert.Subset(t, names, []string{"status", "total", "paid", "created", "customer.id", "rank", "order", "limit", "cursor"})
	})

	t.Run("a watch: the event stream, its events, 410, and tickets", func(t *testing.T) {
		list := spec.Paths.Find("/v1/views/orders").Get
		ok := list.Responses.Value("200").Value
		es := ok.Content["text/event-stream"]
		require.NotNil(t, es, "the list's 200 may be an event stream")
		assert.Contains(t, es.Schema.Value.Description, "event: synced")
		events := es.Extensions["x-events"].(map[string]any)
		assert.Equal(t, "#/components/schemas/WatchUpsert.orders", events["upsert"].(map[string]any)["$ref"])
		assert.NotNil(t, list.Responses.Value("410"))
		assert.NotNil(t, list.Responses.Value("406"))
		assert.NotNil(t, ok.Headers["Jetbus-Position"])
		var names []string
		for _, p := range list.Parameters {
			names = append(names, p.Value.Name)
		}
		assert.Subset(t, names, []string{"watch", "since", "ticket", "Last-Event-ID"})
		upsert := spec.Components.Schemas["WatchUpsert.orders"].Value
		assert.Equal(t, "#/components/schemas/View.orders", upsert.Properties["doc"].Ref)
		tickets := spec.Paths.Find("/v1/tickets")
		require.NotNil(t, tickets)
		require.NotNil(t, tickets.Post)
		assert.NotNil(t, tickets.Post.Responses.Value("201"))
	})

	t.Run("responses are validated with the registry's schema and 2020-12", func(t *testing.T) {
		r := a.get("/v1/views/orders/o1") // validated by the helper
		require.Equal(t, 200, r.StatusCode, "%s", r.body)
		req, _ := http.NewRequest(http.MethodGet, a.http.URL+"/v1/views/orders/o1", nil)
		h := http.Header{"Content-Type": {"application/json"}, "Cache-Control": {"no-cache"}}
		for _, bad := range []string{
			`{"_id":"o1","status":"lost"}`,           // enum from the registry
			`{"_id":"o1","total":-1}`,                // minimum
			`{"_id":"o1","customer":{"id":7}}`,       // through the rewritten $ref
			`{"_id":"o1","lines":[1]}`,               // prefixItems: 2020-12 only
			`{"_id":"o1","rank":"first"}`,            // the declared filter type
			`{"status":"paid"}`,                      // _id is required
			`{"_id":"o1","_v":"3"}`,                  // _v is an integer
			`{"error":{"code":"nope","message":""}}`, // not a document
		} {
			assert.Error(t, a.validateBody(req, 200, h, []byte(bad)), "%s passed", bad)
		}
		for _, good := range []string{`{"_id":"o1","rank":null}`, `{"_id":"o1","lines":["a",2]}`, `{"_id":"o1","extra":{}}`} {
			assert.NoError(t, a.validateBody(req, 200, h, []byte(good)), "%s failed", good)
		}
		assert.Error(t, a.validateBody(req, 404, h, []byte(`{"error":{"code":"teapot","message":"x","details":{}}}`)), "an unknown error code")
		slim, _ := http.NewRequest(http.MethodGet, a.http.URL+"/v1/views/slim/o1", nil)
		assert.Error(t, a.validateBody(slim, 200, h, []byte(`{"_id":"o1","total":1}`)), "slim returns its fields only")
		assert.NoError(t, a.validateBody(slim, 200, h, []byte(`{"_id":"o1","status":"open","customer":{"id":null}}`)))
	})

	t.Run("ETag, 304, and a new schema version changes the document", func(t *testing.T) {
		r := a.get("/openapi.json")
		require.Equal(t, 200, r.StatusCode)
		etag := r.Header.Get("ETag")
		require.NotEmpty(t, etag)
		assert.Equal(t, 304, a.get("/openapi.json", "If-None-Match", etag).StatusCode)
		_, err := reg.Register(ctx, "orders", []byte(`{"type":"object","properties":{"status":{"type":"string"}}}`), schema.WithMode(schema.ModeNone))
		require.NoError(t, err)
		eventually(t, func() bool { return a.get("/openapi.json", "If-None-Match", etag).StatusCode == 200 }, "a new version, a new document")
	})
}

// TestOpenAPIWithoutRegistry: a view's item schema from its declared fields alone, and a
// secured API's document names the bearer scheme.
func TestOpenAPIWithoutRegistry(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.Tokens = []snapshotapi.Token{{Token: "t", Views: []string{"*"}}} }))
	spec := a.spec()
	require.NotNil(t, spec.Components.SecuritySchemes["bearer"])
	assert.Nil(t, spec.Components.Schemas["Payload.orders"])
	status := spec.Components.Schemas["View.orders"].Value.Properties["status"].Value
	assert.True(t, status.Type.Includes("string") && status.Type.Includes("null"))
	open := spec.Paths.Find("/openapi.json").Get
	require.NotNil(t, open.Security)
	assert.Empty(t, *open.Security, "the document itself is public")
}
