package schema_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/schema"
)

var allModes = []schema.Mode{
	schema.ModeNone, schema.ModeBackward, schema.ModeBackwardTransitive, schema.ModeForward,
	schema.ModeForwardTransitive, schema.ModeFull, schema.ModeFullTransitive,
}

func isBackward(m schema.Mode) bool {
	return m != schema.ModeNone && !strings.HasPrefix(string(m), "FORWARD")
}

func isForward(m schema.Mode) bool {
	return m != schema.ModeNone && !strings.HasPrefix(string(m), "BACKWARD")
}

type compatCase struct {
	name     string
	old, new string
	lenient  bool
	back     string // rule expected in the backward direction, "" if compatible
	fwd      string // rule expected in the forward direction, "" if compatible
	ptr      string // pointer of the first expected reason, when checked
}

const (
	objAB       = `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}}}`
	closedAB    = `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"additionalProperties":false}`
	objA        = `{"type":"object","properties":{"a":{"type":"string"}}}`
	closedA     = `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`
	partialA    = `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}}`
	objAReqA    = `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`
	closedAReqB = `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["b"],"additionalProperties":false}`
)

func prop(typ string) string {
	return `{"type":"object","properties":{"x":` + typ + `}}`
}

var compatCases = []compatCase{
	{name: "annotations only", old: `{"type":"object","title":"A","properties":{"a":{"type":"string","description":"old"}}}`,
		new: `{"$id":"urn:x","type":"object","title":"B","$comment":"c","examples":[{}],"properties":{"a":{"type":"string","description":"new","examples":["x"]}}}`},
	{name: "identical", old: closedAB, new: closedAB},
	{name: "optional property added to open model", old: objA, new: objAB, back: "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", ptr: "/properties/b"},
	{name: "optional property added to open model, lenient", old: objA, new: objAB, lenient: true},
	{name: "empty-schema property added to open model", old: objA, new: `{"type":"object","properties":{"a":{"type":"string"},"b":{}}}`},
	{name: "required property without default added to open model", old: objA,
		new: `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["b"]}`, back: "REQUIRED_PROPERTY_ADDED", ptr: "/required"},
	{name: "required property without default added to open model, lenient", old: objA,
		new: `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["b"]}`, lenient: true, back: "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"},
	{name: "required property without default added to closed model", old: closedA, new: closedAReqB,
		back: "REQUIRED_PROPERTY_ADDED", fwd: "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"},
	{name: "required property with default added to closed model", old: closedA,
		new: `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer","default":0}},"required":["b"],"additionalProperties":false}`,
		fwd: "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"},
	{name: "required property with default added to closed model, lenient", old: closedA, lenient: true,
		new: `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer","default":0}},"required":["b"],"additionalProperties":false}`},
	{name: "optional property added to closed model", old: closedA, new: closedAB, fwd: "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"},
	{name: "optional property added to closed model, lenient", old: closedA, new: closedAB, lenient: true},
	{name: "property removed from closed model", old: closedAB, new: closedA, back: "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", ptr: "/properties/b"},
	{name: "property removed from closed model, lenient", old: closedAB, new: closedA, lenient: true},
	{name: "property removed from open model", old: objAB, new: objA, fwd: "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"},
	{name: "property removed from open model, lenient", old: objAB, new: objA, lenient: true},
	{name: "optional property made required", old: objA, new: objAReqA, back: "REQUIRED_PROPERTY_ADDED"},
	{name: "required property made optional", old: objAReqA, new: objA, fwd: "REQUIRED_PROPERTY_ADDED"},
	{name: "property added, covered by partially open model", old: partialA,
		new:  `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string","maxLength":10}},"additionalProperties":{"type":"string"}}`,
		back: "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"},
	{name: "property added, same schema as partially open model", old: partialA,
		new: `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"additionalProperties":{"type":"string"}}`},
	{name: "property added, not covered by partially open model", old: partialA,
		new:  `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"additionalProperties":{"type":"string"}}`,
		back: "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", fwd: "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"},
	{name: "open model closed", old: objA, new: closedA, back: "ADDITIONAL_PROPERTIES_REMOVED", ptr: "/additionalProperties"},
	{name: "closed model opened", old: closedA, new: objA, fwd: "ADDITIONAL_PROPERTIES_REMOVED"},
	{name: "additionalProperties narrowed to a schema", old: objA, new: partialA, back: "ADDITIONAL_PROPERTIES_NARROWED"},
	{name: "additionalProperties true to empty schema", old: `{"type":"object","additionalProperties":true}`, new: `{"type":"object","additionalProperties":{}}`},
	{name: "patternProperties added to open model", old: objA,
		new: `{"type":"object","properties":{"a":{"type":"string"}},"patternProperties":{"^x-":{"type":"string"}}}`, back: "PATTERN_PROPERTIES_NARROWED"},
	{name: "patternProperties widened in closed model",
		old: `{"type":"object","patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false}`,
		new: `{"type":"object","patternProperties":{"^x-":{"type":["string","null"]}},"additionalProperties":false}`, fwd: "TYPE_NARROWED"},
	{name: "disjoint patternProperties added to closed model",
		old: `{"type":"object","patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false}`,
		new: `{"type":"object","patternProperties":{"^x-":{"type":"string"},"^y-":{"type":"integer"}},"additionalProperties":false}`, fwd: "ADDITIONAL_PROPERTIES_REMOVED"},
	{name: "integer widened to number", old: prop(`{"type":"integer"}`), new: prop(`{"type":"number"}`), fwd: "TYPE_NARROWED", ptr: "/properties/x/type"},
	{name: "number narrowed to integer", old: prop(`{"type":"number"}`), new: prop(`{"type":"integer"}`), back: "TYPE_NARROWED"},
	{name: "string changed to integer", old: prop(`{"type":"string"}`), new: prop(`{"type":"integer"}`), back: "TYPE_CHANGED", fwd: "TYPE_CHANGED"},
	{name: "string made nullable", old: prop(`{"type":"string"}`), new: prop(`{"type":["string","null"]}`), fwd: "TYPE_NARROWED"},
	{name: "type added to untyped", old: prop(`{}`), new: prop(`{"type":"string"}`), back: "TYPE_NARROWED"},
	{name: "enum extended", old: prop(`{"enum":["a","b"]}`), new: prop(`{"enum":["a","b","c"]}`), fwd: "ENUM_NARROWED"},
	{name: "enum narrowed", old: prop(`{"enum":["a","b"]}`), new: prop(`{"enum":["a"]}`), back: "ENUM_NARROWED", ptr: "/properties/x/enum"},
	{name: "enum added", old: prop(`{"type":"string"}`), new: prop(`{"type":"string","enum":["a"]}`), back: "ENUM_ADDED"},
	{name: "const widened to enum", old: prop(`{"const":"a"}`), new: prop(`{"enum":["a","b"]}`), fwd: "ENUM_NARROWED"},
	{name: "enum numbers compared by value", old: prop(`{"enum":[1,2.5]}`), new: prop(`{"enum":[1.0,2.50,3]}`), fwd: "ENUM_NARROWED"},
	{name: "minimum increased", old: prop(`{"type":"integer","minimum":0}`), new: prop(`{"type":"integer","minimum":1}`), back: "MINIMUM_INCREASED"},
	{name: "minimum added", old: prop(`{"type":"integer"}`), new: prop(`{"type":"integer","minimum":0}`), back: "MINIMUM_ADDED"},
	{name: "maximum increased", old: prop(`{"type":"number","maximum":10}`), new: prop(`{"type":"number","maximum":20}`), fwd: "MAXIMUM_DECREASED"},
	{name: "maximum made exclusive", old: prop(`{"type":"number","maximum":10}`), new: prop(`{"type":"number","exclusiveMaximum":10}`), back: "MAXIMUM_DECREASED"},
	{name: "exclusiveMinimum relaxed to minimum", old: prop(`{"type":"number","exclusiveMinimum":0}`), new: prop(`{"type":"number","minimum":0}`), fwd: "MINIMUM_INCREASED"},
	{name: "multipleOf divided", old: prop(`{"type":"integer","multipleOf":10}`), new: prop(`{"type":"integer","multipleOf":5}`), fwd: "MULTIPLE_OF_CHANGED"},
	{name: "multipleOf added", old: prop(`{"type":"number"}`), new: prop(`{"type":"number","multipleOf":0.5}`), back: "MULTIPLE_OF_ADDED"},
	{name: "minLength increased", old: prop(`{"type":"string","minLength":1}`), new: prop(`{"type":"string","minLength":2}`), back: "MIN_LENGTH_INCREASED"},
	{name: "maxLength removed", old: prop(`{"type":"string","maxLength":5}`), new: prop(`{"type":"string"}`), fwd: "MAX_LENGTH_ADDED"},
	{name: "pattern added", old: prop(`{"type":"string"}`), new: prop(`{"type":"string","pattern":"^a"}`), back: "PATTERN_ADDED"},
	{name: "pattern changed", old: prop(`{"type":"string","pattern":"^a"}`), new: prop(`{"type":"string","pattern":"^b"}`), back: "PATTERN_CHANGED", fwd: "PATTERN_CHANGED"},
	{name: "string limits ignored for integers", old: prop(`{"type":"integer"}`), new: prop(`{"type":"integer","maxLength":3,"pattern":"x"}`)},
	{name: "minItems decreased", old: prop(`{"type":"array","minItems":2}`), new: prop(`{"type":"array","minItems":1}`), fwd: "MIN_ITEMS_INCREASED"},
	{name: "maxItems added", old: prop(`{"type":"array"}`), new: prop(`{"type":"array","maxItems":3}`), back: "MAX_ITEMS_ADDED"},
	{name: "uniqueItems added", old: prop(`{"type":"array"}`), new: prop(`{"type":"array","uniqueItems":true}`), back: "UNIQUE_ITEMS_ADDED"},
	{name: "items widened", old: prop(`{"type":"array","items":{"type":"integer"}}`), new: prop(`{"type":"array","items":{"type":"number"}}`), fwd: "TYPE_NARROWED", ptr: "/properties/x/items/type"},
	{name: "tuple extended in closed tuple",
		old: prop(`{"type":"array","prefixItems":[{"type":"string"}],"items":false}`),
		new: prop(`{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}`), fwd: "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"},
	{name: "nested required added",
		old:  `{"type":"object","properties":{"address":{"type":"object","properties":{"zip":{"type":"string"}}}}}`,
		new:  `{"type":"object","properties":{"address":{"type":"object","properties":{"zip":{"type":"string"}},"required":["zip"]}}}`,
		back: "REQUIRED_PROPERTY_ADDED", ptr: "/properties/address/required"},
	{name: "oneOf extended", old: prop(`{"oneOf":[{"type":"string"},{"type":"integer"}]}`),
		new: prop(`{"oneOf":[{"type":"string"},{"type":"integer"},{"type":"null"}]}`), fwd: "SUM_TYPE_NARROWED"},
	{name: "anyOf narrowed", old: prop(`{"anyOf":[{"type":"string"},{"type":"integer"}]}`),
		new: prop(`{"anyOf":[{"type":"string"}]}`), back: "SUM_TYPE_NARROWED"},
	{name: "type rewritten as anyOf", old: prop(`{"type":"string"}`), new: prop(`{"anyOf":[{"type":"string"}]}`)},
	{name: "allOf member added", old: `{"allOf":[{"type":"object","properties":{"a":{"type":"string"}}}]}`,
		new: `{"allOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"required":["a"]}]}`, back: "REQUIRED_PROPERTY_ADDED"},
	{name: "allOf member removed", old: `{"allOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"required":["a"]}]}`,
		new: `{"allOf":[{"type":"object","properties":{"a":{"type":"string"}}}]}`, fwd: "REQUIRED_PROPERTY_ADDED"},
	{name: "not added", old: prop(`{"type":"string"}`), new: prop(`{"type":"string","not":{"const":"x"}}`), back: "NOT_TYPE_EXTENDED"},
	{name: "not narrowed", old: prop(`{"type":"string","not":{"enum":["x","y"]}}`), new: prop(`{"type":"string","not":{"const":"x"}}`), fwd: "NOT_TYPE_EXTENDED"},
	{name: "$ref target narrowed",
		old: `{"$defs":{"n":{"type":"number"}},"type":"object","properties":{"x":{"$ref":"#/$defs/n"}}}`,
		new: `{"$defs":{"n":{"type":"integer"}},"type":"object","properties":{"x":{"$ref":"#/$defs/n"}}}`, back: "TYPE_NARROWED", ptr: "/$defs/n/type"},
	{name: "recursive schema unchanged",
		old: `{"$defs":{"t":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/t"}}}}},"$ref":"#/$defs/t"}`,
		new: `{"$defs":{"t":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/t"}}}}},"$ref":"#/$defs/t"}`},
	{name: "true schema narrowed to object", old: `true`, new: `{"type":"object"}`, back: "TYPE_NARROWED"},
	{name: "false schema widened", old: `false`, new: `{"type":"object"}`, fwd: "SCHEMA_NARROWED"},
	{name: "dependentRequired added", old: objAB, new: `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"dependentRequired":{"a":["b"]}}`, back: "DEPENDENCY_ADDED"},
	{name: "propertyNames restricted", old: `{"type":"object"}`, new: `{"type":"object","propertyNames":{"pattern":"^[a-z]+$"}}`, back: "PATTERN_ADDED"},
	{name: "minProperties added", old: `{"type":"object"}`, new: `{"type":"object","minProperties":1}`, back: "MIN_PROPERTIES_ADDED"},
	{name: "draft-07 tuple: additionalItems closed",
		old:  `{"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"type":"string"}]}`,
		new:  `{"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"type":"string"}],"additionalItems":false}`,
		back: "ADDITIONAL_ITEMS_REMOVED"},
	{name: "conditional added", old: objAB,
		new:  `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"if":{"required":["a"]},"then":{"required":["b"]}}`,
		back: "CONDITIONAL_CHANGED", fwd: ""},
	{name: "unevaluatedProperties added", old: objAB,
		new:  `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"unevaluatedProperties":false}`,
		back: "UNSUPPORTED_KEYWORD_CHANGED"},
	{name: "maxProperties increased", old: `{"type":"object","maxProperties":2}`, new: `{"type":"object","maxProperties":3}`, fwd: "MAX_PROPERTIES_DECREASED"},
}

func TestCompatibleTable(t *testing.T) {
	require.GreaterOrEqual(t, len(compatCases), 40)
	for _, tc := range compatCases {
		for _, mode := range allModes {
			t.Run(tc.name+"/"+string(mode), func(t *testing.T) {
				policy := schema.PolicyStrict
				if tc.lenient {
					policy = schema.PolicyLenient
				}
				err := schema.CompatibleWithPolicy(policy, mode, []byte(tc.new), []byte(tc.old))
				var want []string
				if isBackward(mode) && tc.back != "" {
					want = append(want, "backward:"+tc.back)
				}
				if isForward(mode) && tc.fwd != "" {
					want = append(want, "forward:"+tc.fwd)
				}
				if len(want) == 0 {
					require.NoError(t, err)
					return
				}
				require.Error(t, err)
				require.ErrorIs(t, err, schema.ErrIncompatible)
				var ie *schema.IncompatibleError
				require.ErrorAs(t, err, &ie)
				got := map[string]schema.Reason{}
				for _, r := range ie.Reasons {
					k := r.Direction + ":" + r.Rule
					if _, ok := got[k]; !ok {
						got[k] = r
					}
					assert.Equal(t, 1, r.Version)
				}
				for _, w := range want {
					r, ok := got[w]
					if assert.True(t, ok, "want a %s reason, got %v", w, ie.Reasons) && tc.ptr != "" && strings.HasPrefix(w, "backward:") {
						assert.Equal(t, tc.ptr, r.Pointer)
					}
				}
				for _, r := range ie.Reasons {
					if r.Direction == "backward" {
						assert.NotEmpty(t, tc.back, "unexpected backward reason %v", r)
					} else {
						assert.NotEmpty(t, tc.fwd, "unexpected forward reason %v", r)
					}
				}
			})
		}
	}
}

func TestCompatibleTransitive(t *testing.T) {
	// v2 was registered under NONE and accepts only strings; the candidate accepts strings
	// but not v1's integers.
	v1 := []byte(prop(`{"type":"integer"}`))
	v2 := []byte(prop(`{"type":"string"}`))
	cand := []byte(prop(`{"type":["string","null"]}`))
	tests := []struct {
		mode    schema.Mode
		wantErr bool
	}{
		{schema.ModeNone, false},
		{schema.ModeBackward, false},
		{schema.ModeBackwardTransitive, true},
		{schema.ModeForward, true},
		{schema.ModeForwardTransitive, true},
		{schema.ModeFull, true},
		{schema.ModeFullTransitive, true},
	}
	for _, tc := range tests {
		t.Run(string(tc.mode), func(t *testing.T) {
			err := schema.Compatible(tc.mode, cand, v1, v2)
			if !tc.wantErr {
				require.NoError(t, err)
				return
			}
			var ie *schema.IncompatibleError
			require.ErrorAs(t, err, &ie)
			versions := map[int]bool{}
			for _, r := range ie.Reasons {
				versions[r.Version] = true
			}
			if tc.mode == schema.ModeBackwardTransitive {
				assert.Equal(t, map[int]bool{1: true}, versions)
			}
			if strings.HasSuffix(string(tc.mode), "TRANSITIVE") {
				assert.True(t, versions[1], "a transitive mode compares with version 1: %v", ie.Reasons)
			} else {
				assert.False(t, versions[1], "a non-transitive mode compares with the latest only: %v", ie.Reasons)
			}
		})
	}
}

func TestCompatibleEveryReason(t *testing.T) {
	old := `{"type":"object","properties":{"a":{"type":"string"},"n":{"type":"integer"}},"additionalProperties":false}`
	cand := `{"type":"object","properties":{"a":{"type":"integer"},"n":{"type":"integer","minimum":3}},"required":["a"],"additionalProperties":false}`
	err := schema.Compatible(schema.ModeBackward, []byte(cand), []byte(old))
	var ie *schema.IncompatibleError
	require.ErrorAs(t, err, &ie)
	var got []string
	for _, r := range ie.Reasons {
		got = append(got, r.Pointer+" "+r.Rule)
	}
	assert.ElementsMatch(t, []string{
		"/properties/a/type TYPE_CHANGED",
		"/properties/n/minimum MINIMUM_ADDED",
		"/required REQUIRED_PROPERTY_ADDED",
	}, got)
	assert.Contains(t, err.Error(), "/properties/a/type: TYPE_CHANGED")
}

func TestCompatibleNoPrevious(t *testing.T) {
	require.NoError(t, schema.Compatible(schema.ModeFullTransitive, []byte(objA)))
}

func TestCompatibleBadInput(t *testing.T) {
	tests := []struct {
		name      string
		mode      schema.Mode
		cand, old string
		want      error
	}{
		{"candidate not JSON", schema.ModeBackward, `{"type":`, objA, schema.ErrInvalidSchema},
		{"previous not JSON", schema.ModeBackward, objA, `nope`, schema.ErrInvalidSchema},
		{"candidate an array", schema.ModeBackward, `[1]`, objA, schema.ErrInvalidSchema},
		{"trailing data", schema.ModeBackward, `{} {}`, objA, schema.ErrInvalidSchema},
		{"bad keyword value", schema.ModeBackward, `{"type":"strin"}`, objA, schema.ErrInvalidSchema},
		{"bad minimum", schema.ModeBackward, `{"minimum":"1"}`, objA, schema.ErrInvalidSchema},
		{"unresolvable ref", schema.ModeBackward, `{"$ref":"#/$defs/missing"}`, objA, schema.ErrInvalidSchema},
		{"remote ref", schema.ModeBackward, `{"$ref":"https://example.com/s.json"}`, objA, schema.ErrInvalidSchema},
		{"unknown mode", schema.Mode("SIDEWAYS"), objA, objA, schema.ErrUnknownMode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := schema.Compatible(tc.mode, []byte(tc.cand), []byte(tc.old))
			require.ErrorIs(t, err, tc.want)
			assert.False(t, errors.Is(err, schema.ErrIncompatible))
		})
	}
	_, err := schema.ParsePolicy("loose")
	require.ErrorIs(t, err, schema.ErrUnknownMode)
	require.ErrorIs(t, schema.CompatibleWithPolicy("loose", schema.ModeBackward, []byte(objA)), schema.ErrUnknownMode)
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]schema.Mode{
		"NONE": schema.ModeNone, "none": schema.ModeNone, "backward": schema.ModeBackward,
		"forward": schema.ModeForward, "BACKWARD_TRANSITIVE": schema.ModeBackwardTransitive,
		"full_transitive": schema.ModeFullTransitive, " FULL ": schema.ModeFull,
		"FORWARD_TRANSITIVE": schema.ModeForwardTransitive,
	} {
		got, err := schema.ParseMode(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "sideways", "BACKWARDS", "full-transitive"} {
		_, err := schema.ParseMode(bad)
		require.ErrorIs(t, err, schema.ErrUnknownMode, fmt.Sprintf("%q", bad))
	}
}
