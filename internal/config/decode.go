package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// issue is an error at a key path, located later (file line, environment variable or flag).
type issue struct {
	path string
	msg  string
}

type issues []issue

func (is *issues) add(path, format string, args ...any) {
	*is = append(*is, issue{path: path, msg: fmt.Sprintf(format, args...)})
}

// has reports whether path has an issue already (a value that could not be read is not
// checked again).
func (is *issues) has(path string) bool {
	for _, i := range *is {
		if i.path == path {
			return true
		}
	}
	return false
}

// decode sets v (addressable) from a plain value (map[string]any, []any, string, nil, or a
// Go scalar from a flag), applying defaults and the field checks of f's tags. raw == nil
// means absent.
func (is *issues) decode(path string, raw any, v reflect.Value, f *field) {
	t := v.Type()
	switch {
	case t == timeType || t == durationType || t == sizeType:
		is.scalar(path, raw, v, f)
	case t == anyType:
		if raw != nil {
			v.Set(reflect.ValueOf(typed(raw)))
		}
	case t.Kind() == reflect.Struct:
		is.decodeStruct(path, raw, v)
	case t.Kind() == reflect.Slice:
		is.decodeSlice(path, raw, v, f)
	case t.Kind() == reflect.Map:
		is.decodeMap(path, raw, v, f)
	default:
		is.scalar(path, raw, v, f)
	}
}

func (is *issues) decodeStruct(path string, raw any, v reflect.Value) {
	m, ok := raw.(map[string]any)
	if raw != nil && !ok {
		is.add(path, "want a mapping, got %s", describe(raw))
		return
	}
	fs := fieldsOf(v.Type())
	for k := range m {
		if !slices.ContainsFunc(fs, func(f field) bool { return f.key == k }) {
			is.add(joinKey(path, k), "unknown key %q%s", k, suggest(k, fs))
		}
	}
	for i := range fs {
		f := &fs[i]
		p := joinKey(path, f.key)
		val, present := m[f.key]
		if present && val == nil {
			present = false // "key:" with nothing after it
		}
		if !present {
			if f.required {
				is.add(p, "required")
				continue
			}
			if f.def != "" {
				val = defaultValue(f)
			}
		}
		is.decode(p, val, v.Field(f.index), f)
	}
}

// defaultValue parses a default tag as YAML into plain values.
func defaultValue(f *field) any {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(f.def), &n); err != nil {
		panic(fmt.Sprintf("config: key %s: bad default %q: %v", f.key, f.def, err))
	}
	yf := &yamlFile{env: func(string) (string, bool) { return "", false }, pos: map[string]pos{}}
	return yf.plain(n.Content[0], "")
}

func (is *issues) decodeSlice(path string, raw any, v reflect.Value, f *field) {
	var l []any
	switch r := raw.(type) {
	case nil:
		if f != nil && f.required {
			is.add(path, "required")
		}
		return
	case []any:
		l = r
	case []string:
		for _, s := range r {
			l = append(l, s)
		}
	case string, scalar:
		if v.Type().Elem().Kind() != reflect.String {
			is.add(path, "want a list, got %s", describe(raw))
			return
		}
		text := fmt.Sprint(raw)
		if sc, ok := raw.(scalar); ok {
			text = sc.Text
		}
		// A comma-separated string stands for a list of strings (environment, flags, and
		// urls: a,b in the file).
		for s := range strings.SplitSeq(text, ",") {
			if s = strings.TrimSpace(s); s != "" {
				l = append(l, s)
			}
		}
	default:
		is.add(path, "want a list, got %s", describe(raw))
		return
	}
	if len(l) == 0 && f != nil && f.required {
		is.add(path, "must not be empty")
	}
	out := reflect.MakeSlice(v.Type(), len(l), len(l))
	for i, e := range l {
		ep := path + "[" + strconv.Itoa(i) + "]"
		if e == nil {
			is.add(ep, "empty list element")
			continue
		}
		is.decode(ep, e, out.Index(i), elemField(f))
	}
	v.Set(out)
}

func (is *issues) decodeMap(path string, raw any, v reflect.Value, f *field) {
	m, ok := raw.(map[string]any)
	if raw != nil && !ok {
		is.add(path, "want a mapping, got %s", describe(raw))
		return
	}
	if m == nil {
		return
	}
	out := reflect.MakeMapWithSize(v.Type(), len(m))
	for k, e := range m {
		ep := joinKey(path, k)
		if f != nil && f.check != "" {
			if err := runCheck(f.check, k); err != nil {
				is.add(ep, "%v", err)
			}
		}
		ev := reflect.New(v.Type().Elem()).Elem()
		if e == nil {
			is.add(ep, "a value is required")
			continue
		}
		ef := elemField(f)
		if ef != nil {
			ef.check = "" // the check applies to the keys
		}
		is.decode(ep, e, ev, ef)
		out.SetMapIndex(reflect.ValueOf(k), ev)
	}
	v.Set(out)
}

// elemField returns the checks of a list or map field that apply to each element.
func elemField(f *field) *field {
	if f == nil {
		return nil
	}
	e := *f
	e.required, e.def = false, ""
	return &e
}

// scalar parses one scalar by v's type and runs f's checks on it.
func (is *issues) scalar(path string, raw any, v reflect.Value, f *field) {
	if raw == nil {
		return // absent, no default: the zero value
	}
	var s string
	switch r := raw.(type) {
	case string:
		s = r
	case scalar:
		s = r.Text
	case map[string]any, []any, []string:
		is.add(path, "want %s, got %s", article(typeName(v.Type())), describe(raw))
		return
	default:
		s = fmt.Sprint(r)
	}
	t := v.Type()
	switch {
	case t == durationType:
		d, err := parseDuration(s)
		if err != nil {
			is.add(path, "want a duration such as 30s, 5m, 24h or 7d, got %q", s)
			return
		}
		v.SetInt(int64(d))
		is.bounds(path, f, int64(d/time.Second), s, d < 0)
	case t == timeType:
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			is.add(path, "want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", s)
			return
		}
		v.Set(reflect.ValueOf(tm))
	case t == sizeType:
		n, err := ParseByteSize(s)
		if err != nil {
			is.add(path, "%v", err)
			return
		}
		v.SetInt(int64(n))
		is.bounds(path, f, int64(n), s, false)
	case t.Kind() == reflect.String:
		v.SetString(s)
		if f != nil && len(f.enum) > 0 && !slices.Contains(f.enum, s) {
			is.add(path, "%q is not one of %s", s, strings.Join(f.enum, ", "))
			return
		}
		if f != nil && f.check != "" && s != "" {
			if err := runCheck(f.check, s); err != nil {
				is.add(path, "%v", err)
			}
		}
		if f != nil && f.required && s == "" {
			is.add(path, "must not be empty")
		}
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			is.add(path, "want true or false, got %q", s)
			return
		}
		v.SetBool(b)
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || (t.Kind() == reflect.Int && (n > math.MaxInt32 || n < math.MinInt32)) {
			is.add(path, "want an integer, got %q", s)
			return
		}
		v.SetInt(n)
		is.bounds(path, f, n, s, false)
	case t.Kind() == reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			is.add(path, "want a number, got %q", s)
			return
		}
		v.SetFloat(x)
		if f != nil && f.min != nil && x < float64(*f.min) {
			is.add(path, "must be at least %d, got %s", *f.min, s)
		}
		if f != nil && f.max != nil && x > float64(*f.max) {
			is.add(path, "must be at most %d, got %s", *f.max, s)
		}
	default:
		panic("config: unsupported type " + t.String())
	}
}

// bounds checks min and max; durations are compared in seconds (min:"1" means at least 1s).
func (is *issues) bounds(path string, f *field, n int64, s string, negative bool) {
	if negative {
		is.add(path, "must not be negative, got %s", s)
		return
	}
	if f == nil {
		return
	}
	if f.min != nil && n < *f.min {
		if f.typ == durationType {
			is.add(path, "must be at least %ds, got %s", *f.min, s)
		} else {
			is.add(path, "must be at least %d, got %s", *f.min, s)
		}
	}
	if f.max != nil && n > *f.max {
		is.add(path, "must be at most %d, got %s", *f.max, s)
	}
}

// parseDuration is time.ParseDuration plus a whole number of days ("7d").
func parseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(d, 10, 32)
		if err != nil {
			return 0, err
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

func describe(raw any) string {
	switch r := raw.(type) {
	case map[string]any:
		return "a mapping"
	case []any, []string:
		return "a list"
	case string:
		return strconv.Quote(r)
	case scalar:
		return strconv.Quote(r.Text)
	}
	return fmt.Sprint(raw)
}

func article(s string) string {
	if strings.IndexByte("aeiou", s[0]) >= 0 {
		return "an " + s
	}
	return "a " + s
}

// suggest proposes the declared key closest to a misspelt one.
func suggest(k string, fs []field) string {
	best, bestD := "", 3
	for _, f := range fs {
		if d := distance(k, f.key); d < bestD {
			best, bestD = f.key, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the Levenshtein distance.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
