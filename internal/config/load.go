package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/v2"

	"github.com/jetbus/jetbus/schema"
)

// Options says where a configuration comes from. Later sources override earlier ones: the
// declared defaults, the file, the environment, the flags.
type Options struct {
	// File is the YAML file ("" reads none).
	File string
	// Environ is the environment as KEY=VALUE (usually os.Environ()): JETBUS_<PATH>
	// variables set keys, and ${NAME} in the file reads any variable.
	Environ []string
	// Flags are the command-line flags that were set.
	Flags []Override
}

// Override is one key set by a command-line flag.
type Override struct {
	// Path is the key path, e.g. "nats.urls".
	Path string
	// Value is a string, or a []string for a list.
	Value any
	// Flag names the flag in error messages, e.g. "--nats-url".
	Flag string
}

// Load reads, merges, decodes and validates a configuration. Every problem found is returned
// at once as Errors, each with its file, line and key path (or its environment variable or
// flag); an error of another type means the file could not be read.
func Load(o Options) (*Config, error) {
	envMap := map[string]string{}
	for _, kv := range o.Environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			envMap[k] = v
		}
	}
	lookup := func(k string) (string, bool) { v, ok := envMap[k]; return v, ok }

	var errs Errors
	sources := map[string]string{} // key path → "env NAME" / "flag --name"
	k := koanf.New(".")
	var positions map[string]pos
	if o.File != "" {
		data, err := os.ReadFile(o.File)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		yf := &yamlFile{source: o.File, env: lookup}
		m := yf.parse(data)
		errs = append(errs, yf.errs...)
		positions = yf.pos
		if m != nil {
			if err := k.Load(confmap.Provider(m, ""), nil); err != nil {
				return nil, fmt.Errorf("config: %w", err)
			}
		}
	}

	known := envPaths()
	sections := map[string]bool{}
	for _, f := range fieldsOf(reflect.TypeFor[Config]()) {
		sections[strings.ToUpper(f.key)] = true
	}
	err := k.Load(env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return o.Environ },
		TransformFunc: func(name, v string) (string, any) {
			if ek, ok := known[name]; ok {
				sources[ek.path] = "env " + name
				return ek.path, v
			}
			// Variables of other tools (JETBUS_TEST_MONGO_URI) pass; a misspelt key of a
			// section is an error.
			section, _, _ := strings.Cut(strings.TrimPrefix(name, EnvPrefix), "_")
			if sections[section] {
				errs = append(errs, &Error{Source: "env " + name, Message: "unknown variable" + nearEnv(name, known)})
			}
			return "", nil
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("config: environment: %w", err)
	}

	if len(o.Flags) > 0 {
		m := map[string]any{}
		for _, f := range o.Flags {
			m[f.Path] = f.Value
			sources[f.Path] = "flag " + f.Flag
		}
		if err := k.Load(confmap.Provider(m, "."), nil); err != nil {
			return nil, fmt.Errorf("config: flags: %w", err)
		}
	}

	c := &Config{File: o.File}
	var is issues
	is.decodeStruct("", k.Raw(), reflect.ValueOf(c).Elem())
	if o.File != "" {
		c.resolvePaths(filepath.Dir(o.File), sources)
	}
	c.crossCheck(&is)
	errs = append(errs, c.checkSchemas()...)

	for _, i := range is {
		errs = append(errs, locate(i, o.File, positions, sources))
	}
	if len(errs) > 0 {
		errs.sort()
		return nil, errs
	}
	return c, nil
}

// locate finds where the key at i.path (or its nearest ancestor) was set.
func locate(i issue, file string, positions map[string]pos, sources map[string]string) *Error {
	e := &Error{Path: i.path, Message: i.msg}
	for p := i.path; p != ""; p = parent(p) {
		if s, ok := sources[p]; ok {
			e.Source = s
			return e
		}
	}
	for p := i.path; p != ""; p = parent(p) {
		if at, ok := positions[p]; ok {
			e.Source, e.Line, e.Column = file, at.line, at.col
			return e
		}
	}
	e.Source = file
	return e
}

func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func nearEnv(name string, known map[string]envKey) string {
	best, bestD := "", 4
	for k := range known {
		if d := distance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// resolvePaths makes the file's relative paths (keys checked as path or dir) relative to the
// file's directory; paths from the environment and flags stay relative to the working
// directory.
func (c *Config) resolvePaths(dir string, sources map[string]string) {
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.Struct:
			if v.Type() == timeType {
				return
			}
			for _, f := range fieldsOf(v.Type()) {
				p := joinKey(path, f.key)
				fv := v.Field(f.index)
				if (f.check == "path" || f.check == "dir") && fv.Kind() == reflect.String {
					s := fv.String()
					if _, fromFlagOrEnv := sources[p]; s != "" && !fromFlagOrEnv && !filepath.IsAbs(s) {
						fv.SetString(filepath.Join(dir, s))
					}
					continue
				}
				walk(fv, p)
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	walk(reflect.ValueOf(c).Elem(), "")
}

// checkSchemas checks the schemas directory as `bridge schema check` does.
func (c *Config) checkSchemas() Errors {
	if c.Schemas == "" {
		return nil
	}
	st, err := os.Stat(c.Schemas)
	if err != nil || !st.IsDir() {
		return Errors{{Source: c.File, Path: "schemas", Message: fmt.Sprintf("%s is not a directory", c.Schemas)}}
	}
	probs, err := schema.CheckDir(c.Schemas)
	if err != nil {
		return Errors{{Source: c.File, Path: "schemas", Message: err.Error()}}
	}
	var errs Errors
	for _, p := range probs {
		errs = append(errs, &Error{Source: p.File, Message: p.Message})
	}
	return errs
}
