package schema_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/schema"
)

// TestCompatibleProperty checks that the checker is sound with the real validator: for random
// schema pairs (mutations of a random base), when Compatible accepts the new schema as
// BACKWARD compatible every random document valid under the old one is valid under the new,
// and when it accepts it as FORWARD compatible every document valid under the new one is valid
// under the old. Required properties with defaults are not generated: that rule assumes
// readers fill defaults, which plain validation does not.
func TestCompatibleProperty(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	const pairs = 600
	var backOK, fwdOK, backDocs, fwdDocs int
	for i := range pairs {
		old := genSchema(rnd, 0)
		nw := mutate(rnd, clone(old), 0)
		for range rnd.IntN(3) {
			nw = mutate(rnd, nw, 0)
		}
		ob, _ := json.Marshal(old)
		nb, _ := json.Marshal(nw)
		ov, err := schema.Compile(ob)
		require.NoError(t, err, "%s", ob)
		nv, err := schema.Compile(nb)
		require.NoError(t, err, "%s", nb)
		back := schema.Compatible(schema.ModeBackward, nb, ob) == nil
		fwd := schema.Compatible(schema.ModeForward, nb, ob) == nil
		if back {
			backOK++
		}
		if fwd {
			fwdOK++
		}
		for range 60 {
			var doc any
			if rnd.IntN(2) == 0 {
				doc = genValue(rnd, old, 0)
			} else {
				doc = genValue(rnd, nw, 0)
			}
			db, _ := json.Marshal(doc)
			validOld := ov.Validate(db) == nil
			validNew := nv.Validate(db) == nil
			if back && validOld {
				backDocs++
				require.True(t, validNew, "pair %d: BACKWARD accepted\nold: %s\nnew: %s\nbut %s is valid under old only: %v", i, ob, nb, db, nv.Validate(db))
			}
			if fwd && validNew {
				fwdDocs++
				require.True(t, validOld, "pair %d: FORWARD accepted\nold: %s\nnew: %s\nbut %s is valid under new only: %v", i, ob, nb, db, ov.Validate(db))
			}
		}
	}
	t.Logf("backward-compatible pairs %d (docs %d), forward-compatible pairs %d (docs %d) of %d", backOK, backDocs, fwdOK, fwdDocs, pairs)
	require.Greater(t, backOK, pairs/10, "too few backward-compatible pairs for the test to mean anything")
	require.Greater(t, fwdOK, pairs/10, "too few forward-compatible pairs for the test to mean anything")
	require.Less(t, backOK, pairs*9/10, "too many compatible pairs: mutations are too weak")
	require.Greater(t, backDocs, 1000)
	require.Greater(t, fwdDocs, 1000)
}

var propNames = []string{"a", "b", "c", "d"}

func clone(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func genSchema(rnd *rand.Rand, depth int) map[string]any {
	k := rnd.IntN(9)
	if depth == 0 {
		k = 8 // the root is an object
	}
	if depth >= 2 && k >= 7 {
		k = rnd.IntN(7)
	}
	s := map[string]any{}
	switch k {
	case 0:
		s["type"] = "string"
		if rnd.IntN(3) == 0 {
			s["maxLength"] = 1 + rnd.IntN(3)
		}
		if rnd.IntN(4) == 0 {
			s["minLength"] = rnd.IntN(3)
		}
		if rnd.IntN(4) == 0 {
			s["pattern"] = []string{"^a", "^[a-z]+$"}[rnd.IntN(2)]
		}
	case 1:
		s["type"] = "integer"
		if rnd.IntN(2) == 0 {
			s["minimum"] = rnd.IntN(4)
		}
		if rnd.IntN(3) == 0 {
			s["maximum"] = 5 + rnd.IntN(5)
		}
		if rnd.IntN(4) == 0 {
			s["multipleOf"] = []int{2, 3, 4}[rnd.IntN(3)]
		}
	case 2:
		s["type"] = "number"
		if rnd.IntN(3) == 0 {
			s["exclusiveMinimum"] = rnd.IntN(3)
		}
		if rnd.IntN(4) == 0 {
			s["exclusiveMaximum"] = 4 + rnd.IntN(4)
		}
		if rnd.IntN(4) == 0 {
			s["multipleOf"] = 0.5
		}
	case 3:
		if rnd.IntN(4) == 0 {
			s["const"] = []any{"a", 1, nil}[rnd.IntN(3)]
		} else {
			s["enum"] = pick(rnd, []any{"a", "b", "c", 1, nil}, 1+rnd.IntN(3))
		}
	case 4:
		s["type"] = []any{"string", "null"}
	case 5:
		s["type"] = "boolean"
		if rnd.IntN(3) == 0 {
			s["not"] = map[string]any{"const": false}
		}
	case 6:
		s["anyOf"] = []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}
	case 7:
		s["type"] = "array"
		s["items"] = genSchema(rnd, depth+1)
		if rnd.IntN(3) == 0 {
			s["maxItems"] = 1 + rnd.IntN(3)
		}
		if rnd.IntN(4) == 0 {
			s["uniqueItems"] = true
		}
		if rnd.IntN(4) == 0 {
			s["minItems"] = 1
		}
	default:
		s["type"] = "object"
		props := map[string]any{}
		var req []any
		for _, n := range propNames {
			if rnd.IntN(2) == 0 {
				props[n] = genSchema(rnd, depth+1)
				if rnd.IntN(3) == 0 {
					req = append(req, n)
				}
			}
		}
		s["properties"] = props
		if len(req) > 0 {
			s["required"] = req
		}
		switch rnd.IntN(3) {
		case 0:
			s["additionalProperties"] = false
		case 1:
			s["additionalProperties"] = map[string]any{"type": "string"}
		}
		if rnd.IntN(4) == 0 {
			s["patternProperties"] = map[string]any{"^e": genSchema(rnd, depth+2)}
		}
		if rnd.IntN(5) == 0 {
			s["minProperties"] = 1
		}
		if rnd.IntN(5) == 0 {
			s = map[string]any{"allOf": []any{s, map[string]any{"required": []any{propNames[rnd.IntN(4)]}}}}
		}
	}
	return s
}

func pick(rnd *rand.Rand, from []any, n int) []any {
	perm := rnd.Perm(len(from))
	out := make([]any, 0, n)
	for _, i := range perm[:n] {
		out = append(out, from[i])
	}
	return out
}

// mutate changes one thing in s, at the root or in a random property.
func mutate(rnd *rand.Rand, s map[string]any, depth int) map[string]any {
	if props, ok := s["properties"].(map[string]any); ok && len(props) > 0 && rnd.IntN(2) == 0 {
		n := propNames[rnd.IntN(len(propNames))]
		if p, ok := props[n].(map[string]any); ok {
			props[n] = mutate(rnd, p, depth+1)
			return s
		}
	}
	if items, ok := s["items"].(map[string]any); ok && rnd.IntN(2) == 0 {
		s["items"] = mutate(rnd, items, depth+1)
		return s
	}
	switch rnd.IntN(19) {
	case 0:
		return genSchema(rnd, max(depth, 1))
	case 1:
		switch s["type"] {
		case "integer":
			s["type"] = "number"
		case "number":
			s["type"] = "integer"
		case "string":
			s["type"] = []any{"string", "null"}
		}
	case 2:
		if props, ok := s["properties"].(map[string]any); ok {
			props[propNames[rnd.IntN(len(propNames))]] = genSchema(rnd, depth+1)
		}
	case 3:
		if props, ok := s["properties"].(map[string]any); ok {
			n := propNames[rnd.IntN(len(propNames))]
			delete(props, n)
			if req, ok := s["required"].([]any); ok {
				keep := []any{}
				for _, r := range req {
					if r != n {
						keep = append(keep, r)
					}
				}
				s["required"] = keep
			}
		}
	case 4:
		if props, ok := s["properties"].(map[string]any); ok {
			for n := range props {
				req, _ := s["required"].([]any)
				if !slices.Contains(req, any(n)) {
					s["required"] = append(req, n)
				}
				break
			}
		}
	case 5:
		delete(s, "required")
	case 6:
		if _, ok := s["properties"]; ok {
			switch rnd.IntN(3) {
			case 0:
				s["additionalProperties"] = false
			case 1:
				s["additionalProperties"] = map[string]any{"type": "string"}
			default:
				delete(s, "additionalProperties")
			}
		}
	case 7:
		if _, ok := s["minimum"]; ok {
			delete(s, "minimum")
		} else {
			s["minimum"] = rnd.IntN(4)
		}
	case 8:
		if _, ok := s["maxLength"]; ok {
			s["maxLength"] = 1 + rnd.IntN(4)
		} else {
			s["maxLength"] = 2
		}
	case 9:
		if e, ok := s["enum"].([]any); ok {
			if rnd.IntN(2) == 0 && len(e) > 1 {
				s["enum"] = e[1:]
			} else {
				s["enum"] = append(e, "z")
			}
		}
	case 10:
		if _, ok := s["pattern"]; ok {
			delete(s, "pattern")
		} else if s["type"] == "string" {
			s["pattern"] = "^a"
		}
	case 11:
		s = map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
	case 12:
		if a, ok := s["anyOf"].([]any); ok && len(a) > 1 {
			s["anyOf"] = a[:len(a)-1]
		}
	case 13:
		if _, ok := s["maxItems"]; ok {
			delete(s, "maxItems")
		} else if s["type"] == "array" {
			s["maxItems"] = 1
		}
	case 14:
		if m, ok := s["multipleOf"]; ok && rnd.IntN(2) == 0 {
			delete(s, "multipleOf")
		} else if ok {
			if n, isInt := m.(float64); isInt && n == 4 {
				s["multipleOf"] = 2
			} else {
				s["multipleOf"] = 4
			}
		} else if s["type"] == "integer" || s["type"] == "number" {
			s["multipleOf"] = 2
		}
	case 15:
		if _, ok := s["patternProperties"]; ok {
			delete(s, "patternProperties")
		} else if _, isObj := s["properties"]; isObj {
			s["patternProperties"] = map[string]any{"^e": genSchema(rnd, depth+2)}
		}
	case 16:
		if a, ok := s["allOf"].([]any); ok {
			if inner, ok := a[0].(map[string]any); ok {
				return inner
			}
		} else if _, isObj := s["properties"]; isObj {
			return map[string]any{"allOf": []any{s, map[string]any{"required": []any{propNames[rnd.IntN(4)]}}}}
		}
	case 17:
		if _, ok := s["exclusiveMaximum"]; ok {
			s["maximum"] = s["exclusiveMaximum"]
			delete(s, "exclusiveMaximum")
		} else if m, ok := s["maximum"]; ok {
			s["exclusiveMaximum"] = m
			delete(s, "maximum")
		}
	case 18:
		if _, ok := s["const"]; ok {
			s["enum"] = []any{s["const"], "q"}
			delete(s, "const")
		} else if e, ok := s["enum"].([]any); ok {
			delete(s, "enum")
			s["const"] = e[0]
		}
	}
	return s
}

var words = []any{"", "a", "ab", "abc", "b", "z", "A1"}

func randomValue(rnd *rand.Rand, depth int) any {
	switch rnd.IntN(8) {
	case 0:
		return nil
	case 1:
		return rnd.IntN(2) == 0
	case 2:
		return rnd.IntN(12) - 2
	case 3:
		return float64(rnd.IntN(20))/2 - 1
	case 4:
		if depth < 2 {
			return []any{randomValue(rnd, depth+1), randomValue(rnd, depth+1)}
		}
		return []any{}
	case 5:
		if depth < 2 {
			return map[string]any{propNames[rnd.IntN(4)]: randomValue(rnd, depth+1)}
		}
		return map[string]any{}
	default:
		return words[rnd.IntN(len(words))]
	}
}

// genValue generates a value that often, not always, validates against s.
func genValue(rnd *rand.Rand, s map[string]any, depth int) any {
	if rnd.IntN(10) == 0 || depth > 3 {
		return randomValue(rnd, depth)
	}
	if e, ok := s["enum"].([]any); ok {
		return e[rnd.IntN(len(e))]
	}
	if c, ok := s["const"]; ok && rnd.IntN(4) != 0 {
		return c
	}
	if a, ok := s["allOf"].([]any); ok {
		first, _ := a[0].(map[string]any)
		return genValue(rnd, first, depth)
	}
	if a, ok := s["anyOf"].([]any); ok {
		alt, _ := a[rnd.IntN(len(a))].(map[string]any)
		return genValue(rnd, alt, depth)
	}
	typ := s["type"]
	if ts, ok := typ.([]any); ok {
		typ = ts[rnd.IntN(len(ts))]
	}
	switch typ {
	case "string":
		return words[rnd.IntN(len(words))]
	case "integer":
		return rnd.IntN(12) - 1
	case "number":
		return float64(rnd.IntN(24))/2 - 1
	case "boolean":
		return rnd.IntN(2) == 0
	case "null":
		return nil
	case "array":
		items, _ := s["items"].(map[string]any)
		out := []any{}
		for range rnd.IntN(4) {
			out = append(out, genValue(rnd, items, depth+1))
		}
		return out
	case "object":
		props, _ := s["properties"].(map[string]any)
		out := map[string]any{}
		for _, n := range propNames {
			if p, ok := props[n].(map[string]any); ok && rnd.IntN(4) != 0 {
				out[n] = genValue(rnd, p, depth+1)
			}
		}
		for range rnd.IntN(3) {
			n := []string{"a", "b", "c", "d", "e", "ex"}[rnd.IntN(6)]
			if _, ok := out[n]; !ok {
				out[n] = randomValue(rnd, depth+1)
			}
		}
		return out
	}
	return randomValue(rnd, depth)
}
