package schema

import (
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Compatible reports whether candidate may follow previous (oldest first, the last one being
// the latest version) under mode, with the STRICT policy. It returns nil when it may, an
// *IncompatibleError (matching ErrIncompatible) listing every difference as a JSON pointer in
// the candidate and a rule when it may not, an error wrapping ErrInvalidSchema when a
// document is not a valid JSON Schema, and one wrapping ErrUnknownMode for an unknown mode.
//
// The check is structural and conservative: when it cannot prove that one schema accepts
// everything the other accepts it reports a difference. oneOf is compared as anyOf, as in
// Confluent: overlap between alternatives is not detected. A required property added with a
// "default" is compatible, as in Confluent (readers fill the default; see the "default"
// upcast operation).
func Compatible(mode Mode, candidate []byte, previous ...[]byte) error {
	return CompatibleWithPolicy(PolicyStrict, mode, candidate, previous...)
}

// CompatibleWithPolicy is Compatible with a choice of policy.
func CompatibleWithPolicy(policy Policy, mode Mode, candidate []byte, previous ...[]byte) error {
	if mode == "" {
		mode = DefaultMode
	}
	if err := mode.valid(); err != nil {
		return err
	}
	if policy == "" {
		policy = PolicyStrict
	}
	if _, err := ParsePolicy(string(policy)); err != nil {
		return err
	}
	cand, err := parseSchema(candidate)
	if err != nil {
		return fmt.Errorf("candidate: %w", err)
	}
	prev := make([]any, len(previous))
	for i, p := range previous {
		if prev[i], err = parseSchema(p); err != nil {
			return fmt.Errorf("previous schema %d: %w", i+1, err)
		}
	}
	versions := make([]int, len(prev))
	for i := range prev {
		versions[i] = i + 1
	}
	reasons := compareAll(policy, mode, cand, prev, versions)
	if len(reasons) == 0 {
		return nil
	}
	m, _ := ParseMode(string(mode))
	return &IncompatibleError{Mode: m, Reasons: reasons}
}

// compareAll checks cand against prev (oldest first, numbered by versions) under mode.
func compareAll(policy Policy, mode Mode, cand any, prev []any, versions []int) []Reason {
	mode, _ = ParseMode(string(mode))
	if mode == ModeNone || len(prev) == 0 {
		return nil
	}
	from := len(prev) - 1
	if mode.transitive() {
		from = 0
	}
	var out []Reason
	for i := len(prev) - 1; i >= from; i-- {
		if mode.backward() {
			c := newChecker(policy, cand, prev[i], true)
			for _, r := range c.run() {
				r.Direction, r.Version = "backward", versions[i]
				out = append(out, r)
			}
		}
		if mode.forward() {
			c := newChecker(policy, prev[i], cand, false)
			for _, r := range c.run() {
				r.Direction, r.Version = "forward", versions[i]
				out = append(out, r)
			}
		}
	}
	return out
}

// parseSchema decodes a schema document (numbers as json.Number) and compiles it to make
// sure it is a valid JSON Schema.
func parseSchema(doc []byte) (any, error) {
	v, err := decodeJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	switch v.(type) {
	case map[string]any, bool:
	default:
		return nil, fmt.Errorf("%w: a schema is a JSON object or boolean, got %s", ErrInvalidSchema, jsonKind(v))
	}
	if _, err := compile("mem:///schema.json", v); err != nil {
		return nil, err
	}
	return v, nil
}

func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number, float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// node is a subschema with where it lives in its document.
type node struct {
	m   map[string]any
	ptr string // JSON pointer in its document (where it would be, for absent subschemas)
}

// annotations are keywords that never change what validates.
var annotations = map[string]bool{
	"title": true, "description": true, "$id": true, "examples": true, "$comment": true,
	"default": true, "deprecated": true, "readOnly": true, "writeOnly": true, "$schema": true,
	"$anchor": true, "$defs": true, "definitions": true, "format": true, "$vocabulary": true,
	"contentEncoding": true, "contentMediaType": true, "contentSchema": true, "$dynamicAnchor": true,
}

// handled lists the assertion keywords the checker understands; any other keyword on the
// reader side must be equal on the writer side.
var handled = map[string]bool{
	"type": true, "enum": true, "const": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true, "minLength": true,
	"maxLength": true, "pattern": true, "items": true, "prefixItems": true, "additionalItems": true,
	"contains": true, "minContains": true, "maxContains": true, "minItems": true, "maxItems": true,
	"uniqueItems": true, "properties": true, "patternProperties": true, "additionalProperties": true,
	"required": true, "minProperties": true, "maxProperties": true, "propertyNames": true,
	"dependentRequired": true, "dependentSchemas": true, "dependencies": true, "allOf": true,
	"anyOf": true, "oneOf": true, "not": true, "if": true, "then": true, "else": true, "$ref": true,
}

const maxDepth = 64

// checker decides whether a reader schema accepts every instance a writer schema accepts.
type checker struct {
	lenient      bool
	rRoot, wRoot any
	candidateIsR bool            // reasons point into the reader (BACKWARD) or the writer
	stack        map[string]bool // pairs being compared, for cycles through $ref
	depth        int
}

func newChecker(policy Policy, reader, writer any, candidateIsReader bool) *checker {
	return &checker{
		lenient:      policy == PolicyLenient,
		rRoot:        reader,
		wRoot:        writer,
		candidateIsR: candidateIsReader,
		stack:        map[string]bool{},
	}
}

func (c *checker) run() []Reason {
	return c.cmp(c.toNode(c.rRoot, ""), c.toNode(c.wRoot, ""))
}

func (c *checker) toNode(v any, ptr string) node {
	switch s := v.(type) {
	case bool:
		if s {
			return node{m: map[string]any{}, ptr: ptr}
		}
		return node{m: map[string]any{"not": map[string]any{}}, ptr: ptr}
	case map[string]any:
		return node{m: s, ptr: ptr}
	}
	return node{m: map[string]any{}, ptr: ptr}
}

// child returns the subschema at key of n (or at key/sub), and whether it is present.
func (c *checker) child(n node, key string, sub ...string) (node, bool) {
	ptr := n.ptr + "/" + escapePtr(key)
	v, ok := n.m[key]
	for _, s := range sub {
		ptr += "/" + escapePtr(s)
		if !ok {
			break
		}
		switch t := v.(type) {
		case map[string]any:
			v, ok = t[s]
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(t) {
				ok = false
			} else {
				v = t[i]
			}
		default:
			ok = false
		}
	}
	if !ok {
		return node{m: map[string]any{}, ptr: ptr}, false
	}
	return c.toNode(v, ptr), true
}

func escapePtr(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// resolve expands a local $ref. A $ref with sibling assertions becomes allOf [target,
// siblings].
func (c *checker) resolve(n node, root any) node {
	for range maxDepth {
		ref, ok := n.m["$ref"].(string)
		if !ok {
			return n
		}
		target, tptr, ok := lookupRef(root, ref)
		if !ok {
			// An unresolvable reference: compile refuses those, so this is a remote one.
			return n
		}
		t := c.toNode(target, tptr)
		siblings := map[string]any{}
		for k, v := range n.m {
			if k != "$ref" && !annotations[k] {
				siblings[k] = v
			}
		}
		if len(siblings) == 0 {
			n = t
			continue
		}
		return node{m: map[string]any{"allOf": []any{target, siblings}}, ptr: n.ptr}
	}
	return n
}

func lookupRef(root any, ref string) (any, string, bool) {
	if !strings.HasPrefix(ref, "#") {
		return nil, "", false
	}
	ptr := ref[1:]
	v := root
	if ptr == "" {
		return v, "", true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, "", false
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch t := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = t[tok]; !ok {
				return nil, "", false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(t) {
				return nil, "", false
			}
			v = t[i]
		default:
			return nil, "", false
		}
	}
	return v, ptr, true
}

func isEmpty(n node) bool {
	for k := range n.m {
		if !annotations[k] {
			return false
		}
	}
	return true
}

func isFalse(n node) bool {
	if len(n.m) == 0 {
		return false
	}
	nt, ok := n.m["not"].(map[string]any)
	if !ok {
		if b, isB := n.m["not"].(bool); !isB || !b {
			return false
		}
	} else if !isEmpty(node{m: nt}) {
		return false
	}
	for k := range n.m {
		if k != "not" && !annotations[k] {
			return false
		}
	}
	return true
}

func (c *checker) reason(r, w node, keyword, rule, format string, args ...any) Reason {
	n := w
	if c.candidateIsR {
		n = r
	}
	p := n.ptr
	if keyword != "" {
		p += "/" + keyword
	}
	return Reason{Pointer: p, Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// cmp returns why the reader r does not accept every instance the writer w accepts.
func (c *checker) cmp(r, w node) []Reason {
	r = c.resolve(r, c.rRoot)
	w = c.resolve(w, c.wRoot)
	if isEmpty(r) || isFalse(w) {
		return nil
	}
	key := identity(r.m) + "|" + identity(w.m)
	if c.stack[key] {
		return nil // coinduction: a cycle through references is compatible if all else is
	}
	if c.depth >= maxDepth {
		return []Reason{c.reason(r, w, "", "DEPTH_LIMIT", "schemas nest deeper than %d levels; cannot compare", maxDepth)}
	}
	c.stack[key] = true
	c.depth++
	defer func() { delete(c.stack, key); c.depth-- }()

	if isFalse(r) {
		return []Reason{c.reason(r, w, "", "SCHEMA_NARROWED", "the schema accepts nothing where it accepted values before")}
	}
	// Writer conjunctions: flatten allOf into one (weaker) schema.
	if _, ok := w.m["allOf"]; ok {
		return c.cmp(r, c.flattenAllOf(w))
	}
	// Writer sum types: every alternative must be accepted.
	if alts, kw := sumOf(w); alts != nil {
		base := without(w, kw)
		if len(c.cmp(r, base)) == 0 {
			return nil
		}
		var out []Reason
		for i := range alts {
			a, _ := c.child(w, kw, strconv.Itoa(i))
			a = c.resolve(a, c.wRoot)
			merged := node{m: mergeConj(base.m, c.flattenAllOf(a).m), ptr: a.ptr}
			out = append(out, c.cmp(r, merged)...)
		}
		return out
	}
	// Reader conjunctions: each must accept the writer.
	if all, ok := r.m["allOf"].([]any); ok {
		out := c.cmp(without(r, "allOf"), w)
		for i := range all {
			a, _ := c.child(r, "allOf", strconv.Itoa(i))
			out = append(out, c.cmp(a, w)...)
		}
		return out
	}
	// Reader sum types: some alternative must accept the writer.
	if alts, kw := sumOf(r); alts != nil {
		out := c.cmp(without(r, kw), w)
		var first []Reason
		for i := range alts {
			a, _ := c.child(r, kw, strconv.Itoa(i))
			rs := c.cmp(a, w)
			if len(rs) == 0 {
				return out
			}
			if first == nil {
				first = rs
			}
		}
		detail := "no alternative accepts the writer's values"
		if len(first) > 0 {
			detail += " (first alternative: " + first[0].Rule + " at " + first[0].Pointer + ")"
		}
		return append(out, c.reason(r, w, kw, "SUM_TYPE_NARROWED", "%s: %s", kw, detail))
	}
	return c.cmpBase(r, w)
}

// identity names a schema map, so a cycle through references is recognized while derived
// schemas (merged, stripped) count as new.
func identity(m map[string]any) string {
	return strconv.FormatUint(uint64(reflect.ValueOf(m).Pointer()), 16)
}

func sumOf(n node) ([]any, string) {
	for _, k := range []string{"anyOf", "oneOf"} {
		if a, ok := n.m[k].([]any); ok {
			return a, k
		}
	}
	return nil, ""
}

func without(n node, keys ...string) node {
	m := make(map[string]any, len(n.m))
	for k, v := range n.m {
		if !slices.Contains(keys, k) {
			m[k] = v
		}
	}
	return node{m: m, ptr: n.ptr}
}

// flattenAllOf merges a writer's allOf members into one schema that accepts at least what
// the conjunction accepts.
func (c *checker) flattenAllOf(n node) node {
	all, ok := n.m["allOf"].([]any)
	if !ok {
		return n
	}
	m := without(n, "allOf").m
	for i := range all {
		a, _ := c.child(n, "allOf", strconv.Itoa(i))
		a = c.flattenAllOf(c.resolve(a, c.wRoot))
		m = mergeConj(m, a.m)
	}
	return node{m: m, ptr: n.ptr}
}

// mergeConj merges b into a for a writer: the result only holds keywords of a or b, so every
// instance valid under both is valid under it.
func mergeConj(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if annotations[k] {
			continue
		}
		cur, ok := out[k]
		if !ok {
			out[k] = v
			continue
		}
		switch k {
		case "required":
			ra, _ := cur.([]any)
			rb, _ := v.([]any)
			u := append([]any(nil), ra...)
			for _, x := range rb {
				if !slices.Contains(u, x) {
					u = append(u, x)
				}
			}
			out[k] = u
		case "properties":
			pa, _ := cur.(map[string]any)
			pb, _ := v.(map[string]any)
			u := make(map[string]any, len(pa)+len(pb))
			for n, s := range pb {
				u[n] = s
			}
			for n, s := range pa {
				u[n] = s
			}
			out[k] = u
		}
	}
	return out
}

// types of a schema; nil means every type.
func typesOf(n node) map[string]bool {
	switch t := n.m["type"].(type) {
	case string:
		return map[string]bool{t: true}
	case []any:
		s := map[string]bool{}
		for _, x := range t {
			if str, ok := x.(string); ok {
				s[str] = true
			}
		}
		return s
	}
	if vals, ok := enumOf(n); ok {
		s := map[string]bool{}
		for _, v := range vals {
			k := jsonKind(v)
			if k == "number" && isIntegral(v) {
				k = "integer"
			}
			s[k] = true
		}
		return s
	}
	return nil
}

func isIntegral(v any) bool {
	r, ok := rat(v)
	return ok && r.IsInt()
}

var allTypes = []string{"array", "boolean", "integer", "null", "number", "object", "string"}

func mayBe(types map[string]bool, t ...string) bool {
	if types == nil {
		return true
	}
	for _, x := range t {
		if types[x] {
			return true
		}
		if x == "integer" && types["number"] {
			return true
		}
	}
	return false
}

func covered(t string, reader map[string]bool) bool {
	return reader == nil || reader[t] || (t == "integer" && reader["number"])
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func enumOf(n node) ([]any, bool) {
	if v, ok := n.m["const"]; ok {
		return []any{v}, true
	}
	if e, ok := n.m["enum"].([]any); ok {
		return e, true
	}
	return nil, false
}

// canonical renders a JSON value with sorted keys and normalized numbers, for equality.
func canonical(v any) string {
	var b strings.Builder
	writeCanonical(&b, v)
	return b.String()
}

func writeCanonical(b *strings.Builder, v any) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			writeCanonical(b, t[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, x := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, x)
		}
		b.WriteByte(']')
	case json.Number, float64:
		r, _ := rat(t)
		if r == nil {
			fmt.Fprint(b, t)
			return
		}
		b.WriteString(r.RatString())
	default:
		x, _ := json.Marshal(t)
		b.Write(x)
	}
}

func rat(v any) (*big.Rat, bool) {
	switch t := v.(type) {
	case json.Number:
		r, ok := new(big.Rat).SetString(string(t))
		return r, ok
	case float64:
		r := new(big.Rat)
		if r.SetFloat64(t) == nil {
			return nil, false
		}
		return r, true
	case int:
		return new(big.Rat).SetInt64(int64(t)), true
	}
	return nil, false
}

func (c *checker) cmpBase(r, w node) []Reason {
	var out []Reason
	for k := range r.m {
		if !handled[k] && !annotations[k] {
			if canonical(r.m[k]) != canonical(w.m[k]) {
				out = append(out, c.reason(r, w, escapePtr(k), "UNSUPPORTED_KEYWORD_CHANGED", "keyword %q is not compared structurally and differs", k))
			}
		}
	}
	rt, wt := typesOf(r), typesOf(w)
	if _, explicit := r.m["type"]; explicit {
		var missing []string
		wl := allTypes
		if wt != nil {
			wl = sortedKeys(wt)
		}
		for _, t := range wl {
			if !covered(t, rt) {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			rule := "TYPE_NARROWED"
			overlap := false
			for _, t := range wl {
				if covered(t, rt) || (t == "number" && rt["integer"]) {
					overlap = true
				}
			}
			if !overlap {
				rule = "TYPE_CHANGED"
			}
			out = append(out, c.reason(r, w, "type", rule, "type %v does not accept %v values", sortedKeys(rt), missing))
		}
	}
	out = append(out, c.cmpEnum(r, w)...)
	if mayBe(wt, "number", "integer") {
		out = append(out, c.cmpNumber(r, w)...)
	}
	if mayBe(wt, "string") {
		out = append(out, c.cmpString(r, w)...)
	}
	if mayBe(wt, "array") {
		out = append(out, c.cmpArray(r, w)...)
	}
	if mayBe(wt, "object") {
		out = append(out, c.cmpObject(r, w)...)
	}
	out = append(out, c.cmpNot(r, w)...)
	for _, k := range []string{"if", "then", "else"} {
		if _, ok := r.m[k]; ok {
			if canonical(r.m["if"]) != canonical(w.m["if"]) || canonical(r.m["then"]) != canonical(w.m["then"]) || canonical(r.m["else"]) != canonical(w.m["else"]) {
				out = append(out, c.reason(r, w, k, "CONDITIONAL_CHANGED", "if/then/else differs from the other schema's"))
			}
			break
		}
	}
	return out
}

func (c *checker) cmpEnum(r, w node) []Reason {
	rv, ok := enumOf(r)
	if !ok {
		return nil
	}
	kw := "enum"
	if _, isConst := r.m["const"]; isConst {
		kw = "const"
	}
	wv, ok := enumOf(w)
	if !ok {
		return []Reason{c.reason(r, w, kw, "ENUM_ADDED", "%s restricts values the other schema did not restrict", kw)}
	}
	have := map[string]bool{}
	for _, v := range rv {
		have[canonical(v)] = true
	}
	var missing []string
	for _, v := range wv {
		if !have[canonical(v)] {
			missing = append(missing, canonical(v))
		}
	}
	if len(missing) > 0 {
		return []Reason{c.reason(r, w, kw, "ENUM_NARROWED", "%s does not allow %s", kw, strings.Join(missing, ", "))}
	}
	return nil
}

// bound is a numeric limit.
type bound struct {
	v         *big.Rat
	exclusive bool
	kw        string
}

func lowerBound(n node) *bound {
	var b *bound
	if v, ok := rat(n.m["minimum"]); ok {
		b = &bound{v: v, kw: "minimum"}
		if ex, _ := n.m["exclusiveMinimum"].(bool); ex {
			b.exclusive = true
		}
	}
	if v, ok := rat(n.m["exclusiveMinimum"]); ok {
		if b == nil || v.Cmp(b.v) >= 0 {
			b = &bound{v: v, exclusive: true, kw: "exclusiveMinimum"}
		}
	}
	return b
}

func upperBound(n node) *bound {
	var b *bound
	if v, ok := rat(n.m["maximum"]); ok {
		b = &bound{v: v, kw: "maximum"}
		if ex, _ := n.m["exclusiveMaximum"].(bool); ex {
			b.exclusive = true
		}
	}
	if v, ok := rat(n.m["exclusiveMaximum"]); ok {
		if b == nil || v.Cmp(b.v) <= 0 {
			b = &bound{v: v, exclusive: true, kw: "exclusiveMaximum"}
		}
	}
	return b
}

func (c *checker) cmpNumber(r, w node) []Reason {
	var out []Reason
	if rl := lowerBound(r); rl != nil {
		wl := lowerBound(w)
		switch {
		case wl == nil:
			out = append(out, c.reason(r, w, rl.kw, "MINIMUM_ADDED", "%s %s added", rl.kw, rl.v.RatString()))
		case wl.v.Cmp(rl.v) < 0 || (wl.v.Cmp(rl.v) == 0 && rl.exclusive && !wl.exclusive):
			out = append(out, c.reason(r, w, rl.kw, "MINIMUM_INCREASED", "lower bound raised from %s %s to %s %s", wl.kw, wl.v.RatString(), rl.kw, rl.v.RatString()))
		}
	}
	if ru := upperBound(r); ru != nil {
		wu := upperBound(w)
		switch {
		case wu == nil:
			out = append(out, c.reason(r, w, ru.kw, "MAXIMUM_ADDED", "%s %s added", ru.kw, ru.v.RatString()))
		case wu.v.Cmp(ru.v) > 0 || (wu.v.Cmp(ru.v) == 0 && ru.exclusive && !wu.exclusive):
			out = append(out, c.reason(r, w, ru.kw, "MAXIMUM_DECREASED", "upper bound lowered from %s %s to %s %s", wu.kw, wu.v.RatString(), ru.kw, ru.v.RatString()))
		}
	}
	if rm, ok := rat(r.m["multipleOf"]); ok {
		wm, ok := rat(w.m["multipleOf"])
		wt := typesOf(w)
		integersOnly := wt != nil && !wt["number"]
		switch {
		case !ok && !(integersOnly && rm.Cmp(big.NewRat(1, 1)) == 0):
			out = append(out, c.reason(r, w, "multipleOf", "MULTIPLE_OF_ADDED", "multipleOf %s added", rm.RatString()))
		case ok && !new(big.Rat).Quo(wm, rm).IsInt():
			out = append(out, c.reason(r, w, "multipleOf", "MULTIPLE_OF_CHANGED", "multipleOf %s is not a divisor of %s", rm.RatString(), wm.RatString()))
		}
	}
	return out
}

func intKw(n node, kw string) (int64, bool) {
	r, ok := rat(n.m[kw])
	if !ok || !r.IsInt() {
		return 0, false
	}
	return r.Num().Int64(), true
}

// minLimit compares a lower count limit (minLength, minItems, minProperties).
func (c *checker) minLimit(r, w node, kw, name string) []Reason {
	rv, ok := intKw(r, kw)
	if !ok || rv <= 0 {
		return nil
	}
	wv, ok := intKw(w, kw)
	if !ok {
		return []Reason{c.reason(r, w, kw, name+"_ADDED", "%s %d added", kw, rv)}
	}
	if wv < rv {
		return []Reason{c.reason(r, w, kw, name+"_INCREASED", "%s raised from %d to %d", kw, wv, rv)}
	}
	return nil
}

// maxLimit compares an upper count limit (maxLength, maxItems, maxProperties).
func (c *checker) maxLimit(r, w node, kw, name string) []Reason {
	rv, ok := intKw(r, kw)
	if !ok {
		return nil
	}
	wv, ok := intKw(w, kw)
	if !ok {
		return []Reason{c.reason(r, w, kw, name+"_ADDED", "%s %d added", kw, rv)}
	}
	if wv > rv {
		return []Reason{c.reason(r, w, kw, name+"_DECREASED", "%s lowered from %d to %d", kw, wv, rv)}
	}
	return nil
}

func (c *checker) cmpString(r, w node) []Reason {
	out := c.minLimit(r, w, "minLength", "MIN_LENGTH")
	out = append(out, c.maxLimit(r, w, "maxLength", "MAX_LENGTH")...)
	if rp, ok := r.m["pattern"].(string); ok {
		wp, ok := w.m["pattern"].(string)
		switch {
		case !ok:
			out = append(out, c.reason(r, w, "pattern", "PATTERN_ADDED", "pattern %q added", rp))
		case wp != rp:
			out = append(out, c.reason(r, w, "pattern", "PATTERN_CHANGED", "pattern changed from %q to %q", wp, rp))
		}
	}
	return out
}

// arrayView normalizes draft 2020-12 (prefixItems, items) and draft-07 (items array,
// additionalItems) to positional schemas and a schema for the rest.
type arrayView struct {
	prefix    []node
	rest      node
	restFalse bool
}

func (c *checker) arrayOf(n node, root any) arrayView {
	var v arrayView
	restKey := "items"
	if p, ok := n.m["prefixItems"].([]any); ok {
		for i := range p {
			s, _ := c.child(n, "prefixItems", strconv.Itoa(i))
			v.prefix = append(v.prefix, s)
		}
	} else if p, ok := n.m["items"].([]any); ok {
		for i := range p {
			s, _ := c.child(n, "items", strconv.Itoa(i))
			v.prefix = append(v.prefix, s)
		}
		restKey = "additionalItems"
	}
	v.rest, _ = c.child(n, restKey)
	v.rest = c.resolve(v.rest, root)
	v.restFalse = isFalse(v.rest)
	return v
}

func (c *checker) cmpArray(r, w node) []Reason {
	out := c.minLimit(r, w, "minItems", "MIN_ITEMS")
	out = append(out, c.maxLimit(r, w, "maxItems", "MAX_ITEMS")...)
	if ru, _ := r.m["uniqueItems"].(bool); ru {
		if wu, _ := w.m["uniqueItems"].(bool); !wu {
			out = append(out, c.reason(r, w, "uniqueItems", "UNIQUE_ITEMS_ADDED", "uniqueItems added"))
		}
	}
	ra, wa := c.arrayOf(r, c.rRoot), c.arrayOf(w, c.wRoot)
	n := max(len(ra.prefix), len(wa.prefix))
	for i := range n {
		rs, ws := ra.rest, wa.rest
		if i < len(ra.prefix) {
			rs = ra.prefix[i]
		}
		if i < len(wa.prefix) {
			ws = wa.prefix[i]
		} else if wa.restFalse {
			continue
		}
		if i >= len(ra.prefix) && ra.restFalse {
			out = append(out, c.reason(r, w, "items", "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", "item %d is no longer allowed", i))
			continue
		}
		out = append(out, c.cmp(rs, ws)...)
	}
	if !wa.restFalse {
		if ra.restFalse && !(len(ra.prefix) == 0 && len(wa.prefix) == 0 && isFalse(wa.rest)) {
			out = append(out, c.reason(r, w, "items", "ADDITIONAL_ITEMS_REMOVED", "items beyond position %d are no longer allowed", len(ra.prefix)))
		} else if !ra.restFalse {
			out = append(out, c.cmp(ra.rest, wa.rest)...)
		}
	}
	if _, ok := r.m["contains"]; ok {
		rc, _ := c.child(r, "contains")
		if wc, ok := c.child(w, "contains"); !ok {
			out = append(out, c.reason(r, w, "contains", "CONTAINS_ADDED", "contains added"))
		} else if len(c.cmp(rc, wc)) > 0 {
			out = append(out, c.reason(r, w, "contains", "CONTAINS_NARROWED", "contains accepts less than before"))
		}
	}
	for _, kw := range []string{"minContains", "maxContains"} {
		if _, ok := r.m[kw]; ok && canonical(r.m[kw]) != canonical(w.m[kw]) {
			out = append(out, c.reason(r, w, kw, "CONTAINS_CHANGED", "%s changed", kw))
		}
	}
	return out
}

// objectView is how an object schema constrains its members.
type objectView struct {
	props    map[string]node
	patterns []patternSchema
	ap       node
	closed   bool
	required map[string]bool
}

type patternSchema struct {
	pattern string
	re      *regexp.Regexp
	n       node
}

func (c *checker) objectOf(n node, root any) objectView {
	v := objectView{props: map[string]node{}, required: map[string]bool{}}
	if p, ok := n.m["properties"].(map[string]any); ok {
		for k := range p {
			s, _ := c.child(n, "properties", k)
			v.props[k] = s
		}
	}
	if p, ok := n.m["patternProperties"].(map[string]any); ok {
		keys := make([]string, 0, len(p))
		for k := range p {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			re, err := regexp.Compile(k)
			if err != nil {
				continue
			}
			s, _ := c.child(n, "patternProperties", k)
			v.patterns = append(v.patterns, patternSchema{pattern: k, re: re, n: s})
		}
	}
	v.ap, _ = c.child(n, "additionalProperties")
	v.ap = c.resolve(v.ap, root)
	v.closed = isFalse(v.ap)
	if req, ok := n.m["required"].([]any); ok {
		for _, x := range req {
			if s, ok := x.(string); ok {
				v.required[s] = true
			}
		}
	}
	return v
}

func (v objectView) matching(name string) []patternSchema {
	var out []patternSchema
	for _, p := range v.patterns {
		if p.re.MatchString(name) {
			out = append(out, p)
		}
	}
	return out
}

// writerCan reports whether the writer can produce a member named name.
func (v objectView) writerCan(name string) bool {
	if _, ok := v.props[name]; ok {
		return true
	}
	return len(v.matching(name)) > 0 || !v.closed
}

// literalPrefix returns the literal prefix of an anchored pattern ("^abc…" → "abc").
func literalPrefix(p string) (string, bool) {
	if !strings.HasPrefix(p, "^") {
		return "", false
	}
	i := 1
	for i < len(p) && (p[i] == '-' || p[i] == '_' || (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= '0' && p[i] <= '9')) {
		i++
	}
	return p[1:i], true
}

// disjoint reports whether no name can match both patterns, as far as literal prefixes tell.
func disjoint(p, q string) bool {
	a, ok1 := literalPrefix(p)
	b, ok2 := literalPrefix(q)
	return ok1 && ok2 && !strings.HasPrefix(a, b) && !strings.HasPrefix(b, a)
}

func (c *checker) cmpObject(r, w node) []Reason {
	var out []Reason
	ro, wo := c.objectOf(r, c.rRoot), c.objectOf(w, c.wRoot)

	names := map[string]bool{}
	for k := range ro.props {
		names[k] = true
	}
	for k := range wo.props {
		names[k] = true
	}
	for _, name := range sortedKeys(names) {
		rp, inR := ro.props[name]
		wp, inW := wo.props[name]
		rPatterns := ro.matching(name)
		if !wo.writerCan(name) {
			continue
		}
		if !inR && len(rPatterns) == 0 && ro.closed {
			if !c.lenient {
				out = append(out, c.reason(r, w, "properties/"+escapePtr(name), "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "property %q was removed from a closed content model", name))
			}
			continue
		}
		// What the reader demands of the member.
		var demands []node
		if inR {
			demands = append(demands, rp)
		}
		for _, p := range rPatterns {
			demands = append(demands, p.n)
		}
		if !inR && len(rPatterns) == 0 {
			demands = append(demands, ro.ap)
		}
		// What the writer may put there: any one source is a sound over-approximation.
		var sources []node
		switch {
		case inW:
			sources = []node{wp}
		case len(wo.matching(name)) > 0:
			for _, p := range wo.matching(name) {
				sources = append(sources, p.n)
			}
		default:
			sources = []node{wo.ap}
		}
		var rs []Reason
		for _, src := range sources {
			rs = nil
			for _, d := range demands {
				rs = append(rs, c.cmp(d, src)...)
			}
			if len(rs) == 0 {
				break
			}
		}
		if len(rs) == 0 {
			continue
		}
		switch {
		case inR && !inW && len(wo.matching(name)) == 0 && isEmpty(c.resolve(wo.ap, c.wRoot)):
			if c.lenient && !ro.required[name] {
				continue
			}
			out = append(out, c.reason(r, w, "properties/"+escapePtr(name), "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "property %q was added to an open content model, where the other schema allowed it with any value", name))
		case inR && !inW:
			out = append(out, c.reason(r, w, "properties/"+escapePtr(name), "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "property %q was added but the other schema's additionalProperties/patternProperties allow values it refuses: %s", name, rs[0].Rule))
		case !inR && inW:
			out = append(out, c.reason(r, w, "additionalProperties", "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "property %q was removed but additionalProperties/patternProperties refuse its values: %s", name, rs[0].Rule))
		default:
			out = append(out, rs...)
		}
	}

	// Members named in neither schema's properties.
	type source struct {
		n       node
		pattern string // "" for additionalProperties
	}
	var sources []source
	if !wo.closed {
		sources = append(sources, source{n: wo.ap})
	}
	for _, p := range wo.patterns {
		sources = append(sources, source{n: p.n, pattern: p.pattern})
	}
	for _, src := range sources {
		coveredByPattern := false
		for _, q := range ro.patterns {
			if src.pattern != "" && disjoint(src.pattern, q.pattern) {
				continue
			}
			if src.pattern == q.pattern {
				coveredByPattern = true
			}
			if rs := c.cmp(q.n, src.n); len(rs) > 0 {
				if src.pattern == q.pattern {
					out = append(out, rs...)
				} else {
					out = append(out, c.reason(r, w, "patternProperties/"+escapePtr(q.pattern), "PATTERN_PROPERTIES_NARROWED", "members matching %q refuse values the other schema allows: %s", q.pattern, rs[0].Rule))
				}
			}
		}
		if coveredByPattern {
			continue
		}
		what := "additional properties"
		if src.pattern != "" {
			what = fmt.Sprintf("members matching %q", src.pattern)
		}
		if ro.closed {
			out = append(out, c.reason(r, w, "additionalProperties", "ADDITIONAL_PROPERTIES_REMOVED", "%s are no longer allowed", what))
			continue
		}
		if rs := c.cmp(ro.ap, src.n); len(rs) > 0 {
			out = append(out, c.reason(r, w, "additionalProperties", "ADDITIONAL_PROPERTIES_NARROWED", "additionalProperties refuses values of %s the other schema allows: %s", what, rs[0].Rule))
		}
	}

	// Required members.
	for _, name := range sortedKeys(ro.required) {
		if wo.required[name] {
			continue
		}
		if rp, ok := ro.props[name]; ok {
			if _, hasDefault := c.resolve(rp, c.rRoot).m["default"]; hasDefault {
				continue
			}
			if _, hasDefault := rp.m["default"]; hasDefault {
				continue
			}
		}
		out = append(out, c.reason(r, w, "required", "REQUIRED_PROPERTY_ADDED", "property %q is required without a default, and the other schema did not require it", name))
	}
	out = append(out, c.minLimit(r, w, "minProperties", "MIN_PROPERTIES")...)
	out = append(out, c.maxLimit(r, w, "maxProperties", "MAX_PROPERTIES")...)
	if _, ok := r.m["propertyNames"]; ok {
		rn, _ := c.child(r, "propertyNames")
		wn, _ := c.child(w, "propertyNames")
		wn.m = mergeConj(map[string]any{"type": "string"}, wn.m)
		out = append(out, c.cmp(rn, wn)...)
	}
	out = append(out, c.cmpDependencies(r, w, wo)...)
	return out
}

func (c *checker) cmpDependencies(r, w node, wo objectView) []Reason {
	var out []Reason
	deps := func(n node) (map[string][]any, map[string]bool) {
		req := map[string][]any{}
		schemas := map[string]bool{}
		for _, kw := range []string{"dependentRequired", "dependencies", "dependentSchemas"} {
			m, _ := n.m[kw].(map[string]any)
			for k, v := range m {
				if a, ok := v.([]any); ok {
					req[k] = append(req[k], a...)
				} else {
					schemas[k] = true
				}
			}
		}
		return req, schemas
	}
	rReq, rSch := deps(r)
	wReq, wSch := deps(w)
	for _, k := range sortedKeysAny(rReq) {
		for _, d := range rReq[k] {
			s, _ := d.(string)
			if !slices.Contains(wReq[k], d) && !wo.required[s] {
				out = append(out, c.reason(r, w, "dependentRequired", "DEPENDENCY_ADDED", "%q now requires %q", k, s))
			}
		}
	}
	for _, k := range sortedKeys(rSch) {
		if !wSch[k] || canonical(depSchema(r, k)) != canonical(depSchema(w, k)) {
			out = append(out, c.reason(r, w, "dependentSchemas", "DEPENDENCY_SCHEMA_CHANGED", "the dependent schema of %q was added or changed", k))
		}
	}
	return out
}

func depSchema(n node, k string) any {
	for _, kw := range []string{"dependentSchemas", "dependencies"} {
		if m, ok := n.m[kw].(map[string]any); ok {
			if v, ok := m[k]; ok {
				return v
			}
		}
	}
	return nil
}

func sortedKeysAny[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (c *checker) cmpNot(r, w node) []Reason {
	if _, ok := r.m["not"]; !ok {
		return nil
	}
	rn, _ := c.child(r, "not")
	wn, ok := c.child(w, "not")
	if !ok {
		return []Reason{c.reason(r, w, "not", "NOT_TYPE_EXTENDED", "not added: values it matches are refused")}
	}
	// The reader refuses what rn accepts; that is fine if the writer already refused it, i.e.
	// if wn accepts everything rn accepts.
	sub := &checker{lenient: c.lenient, rRoot: c.wRoot, wRoot: c.rRoot, candidateIsR: !c.candidateIsR, stack: map[string]bool{}, depth: c.depth}
	if rs := sub.cmp(wn, rn); len(rs) > 0 {
		return []Reason{c.reason(r, w, "not", "NOT_TYPE_EXTENDED", "not matches values the other schema's not did not: %s", rs[0].Rule)}
	}
	return nil
}
