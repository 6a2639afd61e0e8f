package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
)

// field is one declared key: a struct field and its tags.
type field struct {
	key      string
	index    int
	typ      reflect.Type
	desc     string
	def      string // YAML text, "" when none
	example  string // YAML text
	enum     []string
	min, max *int64
	required bool
	check    string
	secret   bool
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
	sizeType     = reflect.TypeFor[ByteSize]()
	anyType      = reflect.TypeFor[any]()
)

var fieldCache sync.Map // reflect.Type → []field

// fieldsOf returns the declared keys of a struct type, in declaration order.
func fieldsOf(t reflect.Type) []field {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.([]field)
	}
	var fs []field
	for i := range t.NumField() {
		sf := t.Field(i)
		key := sf.Tag.Get("yaml")
		if key == "" || key == "-" || !sf.IsExported() {
			continue
		}
		f := field{
			key: key, index: i, typ: sf.Type,
			desc: sf.Tag.Get("desc"), def: sf.Tag.Get("default"), example: sf.Tag.Get("example"),
			required: sf.Tag.Get("required") == "true", check: sf.Tag.Get("check"),
			secret: sf.Tag.Get("secret") == "true",
		}
		if e := sf.Tag.Get("enum"); e != "" {
			f.enum = strings.Split(e, "|")
		}
		f.min, f.max = intTag(sf, "min"), intTag(sf, "max")
		fs = append(fs, f)
	}
	fieldCache.Store(t, fs)
	return fs
}

func intTag(sf reflect.StructField, name string) *int64 {
	s := sf.Tag.Get(name)
	if s == "" {
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("config: field %s: bad %s tag %q", sf.Name, name, s))
	}
	return &n
}

// typeName is how the reference names a type.
func typeName(t reflect.Type) string {
	switch t {
	case durationType:
		return "duration"
	case timeType:
		return "time (RFC 3339)"
	case sizeType:
		return "size"
	case anyType:
		return "any"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Struct:
		return "mapping"
	case reflect.Map:
		return "mapping of " + typeName(t.Elem())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return "list of mappings"
		}
		return "list of " + typeName(t.Elem()) + "s"
	}
	return t.String()
}

// envPaths returns every key that can be set from the environment: the scalars and lists of
// scalars reached from the root through structs only, by variable name.
func envPaths() map[string]envKey {
	out := map[string]envKey{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for _, f := range fieldsOf(t) {
			p := joinKey(path, f.key)
			switch {
			case f.typ.Kind() == reflect.Struct && f.typ != timeType:
				walk(f.typ, p)
			case f.typ.Kind() == reflect.Map, f.typ.Kind() == reflect.Slice && f.typ.Elem().Kind() != reflect.String:
				// lists of mappings and maps: file only
			default:
				out[EnvName(p)] = envKey{path: p, list: f.typ.Kind() == reflect.Slice}
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return out
}

type envKey struct {
	path string
	list bool
}

// EnvPrefix starts every environment variable the configuration reads.
const EnvPrefix = "JETBUS_"

// EnvName returns the environment variable of a key path: JETBUS_ and the path upper-cased
// with dots as underscores (nats.tls.ca → JETBUS_NATS_TLS_CA).
func EnvName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}
