package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jetbus/jetbus"
)

// Schema files. A directory holds one subdirectory per topic, named after the topic, with
// one file per version and an optional sidecar:
//
//	schemas/orders.created/v1.json       the JSON Schema of version 1
//	schemas/orders.created/v2.json
//	schemas/orders.created/v2.meta.json  {"compatibility": "BACKWARD", "upcast": [ops]}
//
// The sidecar's compatibility is the mode version N is checked under (default BACKWARD), its
// policy the policy (default STRICT); its upcast is the declarative upcaster from version N-1
// (an empty list declares the hop an identity).
var (
	schemaFile = regexp.MustCompile(`^v([1-9][0-9]*)\.json$`)
	metaFile   = regexp.MustCompile(`^v([1-9][0-9]*)\.meta\.json$`)
)

// Meta is the content of a sidecar file v<N>.meta.json.
type Meta struct {
	Compatibility Mode   `json:"compatibility,omitempty"`
	Policy        Policy `json:"policy,omitempty"`
	Upcast        []Op   `json:"upcast,omitempty"`
}

// File is one schema version read from a directory.
type File struct {
	Topic   string
	Version int
	Path    string
	Schema  []byte
	// MetaPath is the sidecar's path, "" when there is none.
	MetaPath string
	Meta     Meta
	doc      any
	badMeta  bool
}

// Problem is one thing wrong with schema files, reported as "file: message".
type Problem struct {
	File    string
	Message string
}

func (p Problem) String() string { return p.File + ": " + p.Message }

// Problems is a list of problems; as an error it prints one per line.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// LoadDir reads the schema files under dir, sorted by topic and version. Problems lists what
// is wrong with names, JSON, sidecars and version numbering; the error is for a dir that
// cannot be read.
func LoadDir(dir string) ([]File, Problems, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("schema: read %s: %w", dir, err)
	}
	var files []File
	var probs Problems
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(dir, name)
		if strings.HasPrefix(name, ".") {
			continue
		}
		if !e.IsDir() {
			if strings.HasSuffix(name, ".json") {
				probs = append(probs, Problem{p, "schema files belong in <topic>/v<N>.json"})
			}
			continue
		}
		if err := jetbus.ValidateTopic(name); err != nil {
			probs = append(probs, Problem{p, fmt.Sprintf("directory name is not a valid topic: %v", err)})
			continue
		}
		fs, ps, err := loadTopic(p, name)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, fs...)
		probs = append(probs, ps...)
	}
	return files, probs, nil
}

func loadTopic(dir, topic string) ([]File, Problems, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("schema: read %s: %w", dir, err)
	}
	var probs Problems
	byVersion := map[int]*File{}
	metas := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(dir, name)
		if strings.HasPrefix(name, ".") {
			continue
		}
		if m := schemaFile.FindStringSubmatch(name); m != nil && !e.IsDir() {
			n, _ := strconv.Atoi(m[1])
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, nil, fmt.Errorf("schema: %w", err)
			}
			f := &File{Topic: topic, Version: n, Path: p, Schema: data}
			doc, err := parseSchema(data)
			if err != nil {
				probs = append(probs, Problem{p, err.Error()})
			}
			f.doc = doc
			byVersion[n] = f
			continue
		}
		if m := metaFile.FindStringSubmatch(name); m != nil && !e.IsDir() {
			n, _ := strconv.Atoi(m[1])
			metas[n] = p
			continue
		}
		probs = append(probs, Problem{p, "unexpected file: want v<N>.json or v<N>.meta.json (N from 1, no leading zeros)"})
	}
	for n, p := range metas {
		f := byVersion[n]
		if f == nil {
			probs = append(probs, Problem{p, fmt.Sprintf("sidecar without a schema: v%d.json is missing", n)})
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, fmt.Errorf("schema: %w", err)
		}
		f.MetaPath = p
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f.Meta); err != nil {
			probs = append(probs, Problem{p, fmt.Sprintf("bad sidecar: %v", err)})
			f.Meta, f.badMeta = Meta{}, true
			continue
		}
		if err := validateOps(f.Meta.Upcast); err != nil {
			probs = append(probs, Problem{p, err.Error()})
		}
		if n == 1 && f.Meta.Upcast != nil {
			probs = append(probs, Problem{p, "version 1 has no previous version to upcast from"})
		}
	}
	if len(byVersion) == 0 {
		probs = append(probs, Problem{dir, "no schema versions (want v1.json, v2.json, …)"})
		return nil, probs, nil
	}
	var out []File
	versions := make([]int, 0, len(byVersion))
	for n := range byVersion {
		versions = append(versions, n)
	}
	sort.Ints(versions)
	for i, n := range versions {
		if n != i+1 {
			probs = append(probs, Problem{byVersion[n].Path, fmt.Sprintf("versions must be contiguous from v1: v%d is missing", i+1)})
			break
		}
	}
	for _, n := range versions {
		out = append(out, *byVersion[n])
	}
	return out, probs, nil
}

// CheckDir checks the schema files under dir offline: names, valid JSON Schema, sidecars,
// versions contiguous from 1, and each version compatible with the previous ones under its
// sidecar's mode (default BACKWARD; transitive modes against every previous version) and
// policy (default STRICT). It returns every problem; the error is for a dir that cannot be read.
func CheckDir(dir string) (Problems, error) {
	files, probs, err := LoadDir(dir)
	if err != nil {
		return nil, err
	}
	var prev []any
	var nums []int
	var seen map[string]int
	topic := ""
	for _, f := range files {
		if f.Topic != topic {
			topic, prev, nums, seen = f.Topic, nil, nil, map[string]int{}
		}
		if f.doc == nil {
			continue // already reported
		}
		if f.badMeta {
			prev = append(prev, f.doc)
			nums = append(nums, f.Version)
			continue // its mode is unknown; already reported
		}
		fp := fingerprint(f.doc)
		if n, dup := seen[fp]; dup {
			probs = append(probs, Problem{f.Path, fmt.Sprintf("identical to v%d: the registry would return v%d instead of creating a new version", n, n)})
		}
		seen[fp] = f.Version
		mode := f.Meta.Compatibility
		if mode == "" {
			mode = DefaultMode
		}
		policy := f.Meta.Policy
		if policy == "" {
			policy = PolicyStrict
		}
		for _, r := range compareAll(policy, mode, f.doc, prev, nums) {
			under := string(mode)
			if policy != PolicyStrict {
				under += "/" + string(policy)
			}
			probs = append(probs, Problem{f.Path, fmt.Sprintf("incompatible with v%d under %s (%s): %s: %s: %s", r.Version, under, r.Direction, ptrOrRoot(r.Pointer), r.Rule, r.Detail)})
		}
		prev = append(prev, f.doc)
		nums = append(nums, f.Version)
	}
	sort.SliceStable(probs, func(i, j int) bool { return probs[i].File < probs[j].File })
	return probs, nil
}

func ptrOrRoot(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// Pushed reports what PushDir did with one file.
type Pushed struct {
	Topic   string
	Version int
	// Created is false when the registry already held this schema as this version.
	Created bool
}

// PushDir checks the files under dir (CheckDir) and registers every version that the
// registry does not hold yet, in order, each as exactly its file's version. It is idempotent:
// a version the registry holds with the same schema is left alone. A version the registry
// holds with a different schema is a problem (ErrVersionConflict), as is one the registry
// refuses. On problems it returns them as Problems, after pushing what it could.
func PushDir(ctx context.Context, r *Registry, dir string) ([]Pushed, error) {
	probs, err := CheckDir(dir)
	if err != nil {
		return nil, err
	}
	if len(probs) > 0 {
		return nil, probs
	}
	files, _, err := LoadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Pushed
	failed := map[string]bool{}
	for _, f := range files {
		if failed[f.Topic] {
			continue
		}
		if have, err := r.Get(ctx, f.Topic, f.Version); err == nil {
			if have.Fingerprint != fingerprint(f.doc) {
				probs = append(probs, Problem{f.Path, fmt.Sprintf("%v: the registry holds a different schema as %s v%d", ErrVersionConflict, f.Topic, f.Version)})
				failed[f.Topic] = true
				continue
			}
			out = append(out, Pushed{Topic: f.Topic, Version: f.Version})
			continue
		} else if !errors.Is(err, ErrVersionNotFound) {
			return out, err
		}
		opts := []RegisterOption{ExpectVersion(f.Version)}
		if f.Meta.Compatibility != "" {
			opts = append(opts, WithMode(f.Meta.Compatibility))
		}
		if f.Meta.Policy != "" {
			opts = append(opts, UnderPolicy(f.Meta.Policy))
		}
		if f.Meta.Upcast != nil {
			opts = append(opts, WithUpcast(f.Meta.Upcast...))
		}
		v, err := r.Register(ctx, f.Topic, f.Schema, opts...)
		if err != nil {
			if ctx.Err() != nil {
				return out, err
			}
			probs = append(probs, Problem{f.Path, err.Error()})
			failed[f.Topic] = true
			continue
		}
		out = append(out, Pushed{Topic: f.Topic, Version: v.Version, Created: true})
	}
	if len(probs) > 0 {
		return out, probs
	}
	return out, nil
}

// topicsWithSchemas lists the topics of a schema directory and the versions each has.
func topicsWithSchemas(dir string) (map[string]map[int]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("schema: read %s: %w", dir, err)
	}
	out := map[string]map[int]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		files, err := os.ReadDir(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("schema: %w", err)
		}
		for _, f := range files {
			if m := schemaFile.FindStringSubmatch(f.Name()); m != nil {
				n, _ := strconv.Atoi(m[1])
				if out[e.Name()] == nil {
					out[e.Name()] = map[int]bool{}
				}
				out[e.Name()][n] = true
			}
		}
	}
	return out, nil
}
