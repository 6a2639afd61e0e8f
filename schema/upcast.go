package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/jetbus/jetbus"
)

// HeaderUpcastedFrom is set by the upcast middleware on an event it upcast: the version the
// event was written with.
const HeaderUpcastedFrom = "x-upcasted-from"

// Upcaster turns a payload of version n into one of version n+1.
type Upcaster func(json.RawMessage) (json.RawMessage, error)

// Op is one declarative upcast operation, stored with the version it upcasts to. Paths are
// JSON pointers into the payload.
//
//   - {"op":"rename","from":"/a","path":"/b"}: move the value at from to path (nothing if
//     from is absent).
//   - {"op":"copy","from":"/a","path":"/b"}: copy the value at from to path (nothing if from
//     is absent).
//   - {"op":"remove","path":"/a"}: remove the value at path (nothing if absent).
//   - {"op":"default","path":"/a","value":0}: set path to value when it is absent.
//
// Missing parent objects of a target path are created; a parent that is not an object (or,
// for an index, an array) is an error.
type Op struct {
	Op    string          `json:"op"`
	From  string          `json:"from,omitempty"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

func parsePointer(p string) ([]string, error) {
	if p == "" || p[0] != '/' {
		return nil, fmt.Errorf("JSON pointer %q must start with /", p)
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 >= len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Errorf("JSON pointer %q has a bad ~ escape", p)
			}
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

func validateOps(ops []Op) error {
	for i, op := range ops {
		if _, err := parsePointer(op.Path); err != nil {
			return fmt.Errorf("%w: op %d (%s): path: %v", ErrInvalidUpcaster, i, op.Op, err)
		}
		switch op.Op {
		case "rename", "copy":
			if _, err := parsePointer(op.From); err != nil {
				return fmt.Errorf("%w: op %d (%s): from: %v", ErrInvalidUpcaster, i, op.Op, err)
			}
			if op.From == op.Path || strings.HasPrefix(op.Path, op.From+"/") {
				return fmt.Errorf("%w: op %d (%s): path %q is inside from %q", ErrInvalidUpcaster, i, op.Op, op.Path, op.From)
			}
		case "remove":
		case "default":
			if len(op.Value) == 0 || !json.Valid(op.Value) {
				return fmt.Errorf("%w: op %d (default): value must be JSON", ErrInvalidUpcaster, i)
			}
		default:
			return fmt.Errorf("%w: op %d: unknown op %q (want rename, copy, remove or default)", ErrInvalidUpcaster, i, op.Op)
		}
	}
	return nil
}

// Declarative compiles declarative operations into an Upcaster, so Go and declarative
// upcasters run through the same chain. The error wraps ErrInvalidUpcaster.
func Declarative(ops ...Op) (Upcaster, error) {
	if err := validateOps(ops); err != nil {
		return nil, err
	}
	ops = append([]Op(nil), ops...)
	return func(in json.RawMessage) (json.RawMessage, error) {
		doc, err := decodeJSON(in)
		if err != nil {
			return nil, fmt.Errorf("%w: payload is not JSON: %v", ErrUpcast, err)
		}
		for i, op := range ops {
			if doc, err = applyOp(doc, op); err != nil {
				return nil, fmt.Errorf("%w: op %d (%s %s): %v", ErrUpcast, i, op.Op, op.Path, err)
			}
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(doc); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUpcast, err)
		}
		return bytes.TrimRight(b.Bytes(), "\n"), nil
	}, nil
}

func applyOp(doc any, op Op) (any, error) {
	path, _ := parsePointer(op.Path)
	switch op.Op {
	case "remove":
		return doc, remove(doc, path)
	case "default":
		if _, ok := get(doc, path); ok {
			return doc, nil
		}
		v, err := decodeJSON(op.Value)
		if err != nil {
			return doc, err
		}
		return doc, set(doc, path, v)
	case "rename", "copy":
		from, _ := parsePointer(op.From)
		v, ok := get(doc, from)
		if !ok {
			return doc, nil
		}
		if op.Op == "copy" {
			v = deepCopy(v)
		}
		if err := set(doc, path, v); err != nil {
			return doc, err
		}
		if op.Op == "rename" {
			return doc, remove(doc, from)
		}
		return doc, nil
	}
	return doc, fmt.Errorf("unknown op %q", op.Op)
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		a := make([]any, len(t))
		for i, x := range t {
			a[i] = deepCopy(x)
		}
		return a
	}
	return v
}

func index(tok string, n int) (int, bool) {
	i, err := strconv.Atoi(tok)
	return i, err == nil && i >= 0 && i < n && strconv.Itoa(i) == tok
}

func get(doc any, path []string) (any, bool) {
	cur := doc
	for _, tok := range path {
		switch t := cur.(type) {
		case map[string]any:
			v, ok := t[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, ok := index(tok, len(t))
			if !ok {
				return nil, false
			}
			cur = t[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// set puts v at path, creating missing parent objects.
func set(doc any, path []string, v any) error {
	cur := doc
	for i, tok := range path {
		last := i == len(path)-1
		switch t := cur.(type) {
		case map[string]any:
			if last {
				t[tok] = v
				return nil
			}
			next, ok := t[tok]
			if !ok || next == nil {
				next = map[string]any{}
				t[tok] = next
			}
			cur = next
		case []any:
			j, ok := index(tok, len(t))
			if !ok {
				return fmt.Errorf("index %q out of range at /%s", tok, strings.Join(path[:i], "/"))
			}
			if last {
				t[j] = v
				return nil
			}
			cur = t[j]
		default:
			return fmt.Errorf("/%s is a %s, not an object", strings.Join(path[:i], "/"), jsonKind(cur))
		}
	}
	return fmt.Errorf("cannot replace the whole payload")
}

func remove(doc any, path []string) error {
	parent, ok := get(doc, path[:len(path)-1])
	if !ok {
		return nil
	}
	tok := path[len(path)-1]
	switch t := parent.(type) {
	case map[string]any:
		delete(t, tok)
	case []any:
		if _, ok := index(tok, len(t)); ok {
			return fmt.Errorf("removing array elements is not supported")
		}
	}
	return nil
}

// AddUpcaster registers a Go upcaster from version from to from+1 of topic in this process.
// A Go upcaster takes precedence over a declarative one stored with version from+1.
func (r *Registry) AddUpcaster(topic string, from int, fn Upcaster) error {
	if err := jetbus.ValidateTopic(topic); err != nil {
		return err
	}
	if from < 1 || fn == nil {
		return fmt.Errorf("%w: upcaster of %s from version %d (versions start at 1, fn must not be nil)", ErrInvalidUpcaster, topic, from)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.upcasters[topic] == nil {
		r.upcasters[topic] = map[int]Upcaster{}
	}
	r.upcasters[topic][from] = fn
	return nil
}

// Upcast turns payload, written with version from of topic, into the latest version and
// returns it with that version. It does not validate. Errors: ErrNoSchema,
// ErrUnknownVersion (from is newer than the latest), ErrMissingUpcaster, ErrUpcast.
func (r *Registry) Upcast(ctx context.Context, topic string, from int, payload json.RawMessage) (json.RawMessage, int, error) {
	steps, latest, err := r.chain(topic, from)
	if err != nil {
		return nil, 0, err
	}
	for i, step := range steps {
		if payload, err = step(payload); err != nil {
			return nil, 0, fmt.Errorf("%w: %s v%d to v%d: %w", ErrUpcast, topic, from+i, from+i+1, err)
		}
	}
	return payload, latest, nil
}

// chain returns the upcasters from version from to the latest.
func (r *Registry) chain(topic string, from int) ([]Upcaster, int, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t := r.topics[topic]
	var latest *entry
	if t != nil {
		latest = t.latest()
	}
	if latest == nil {
		return nil, 0, fmt.Errorf("%w: %s", ErrNoSchema, topic)
	}
	to := latest.v.Version
	if from > to {
		if t.versions[from] != nil {
			return nil, 0, jetbus.Permanent(fmt.Errorf("%w: %s v%d is deleted and newer than the latest, v%d", ErrUnknownVersion, topic, from, to))
		}
		return nil, 0, fmt.Errorf("%w: %s v%d (latest known: v%d)", ErrUnknownVersion, topic, from, to)
	}
	var steps []Upcaster
	for v := from; v < to; v++ {
		if fn := r.upcasters[topic][v]; fn != nil {
			steps = append(steps, fn)
			continue
		}
		if next := t.versions[v+1]; next != nil && next.v.Upcast != nil {
			if next.upErr != nil {
				return nil, 0, fmt.Errorf("%s v%d: %w", topic, v+1, next.upErr)
			}
			steps = append(steps, next.up)
			continue
		}
		return nil, 0, fmt.Errorf("%w: %s from v%d to v%d", ErrMissingUpcaster, topic, v, v+1)
	}
	return steps, to, nil
}

// UpcastMiddleware returns a handler middleware that brings every event of a topic with
// schemas to the latest version before the handler sees it: it reads the event's
// x-schema-version (an event without one is version 1), runs the upcasters of each hop (Go
// ones first, else the declarative ones stored with the next version), validates the result
// against the latest version, and hands the handler a copy of the event with the new payload,
// x-schema-version set to the latest and x-upcasted-from to the original version. Events of
// topics without a schema and tombstones pass unchanged.
//
// Failures that can never succeed are jetbus.Permanent, so the event is dead-lettered without
// retries: a missing hop (ErrMissingUpcaster), a failing upcaster (ErrUpcast), a malformed
// version header, a payload that fails validation after upcasting (ErrInvalid). A version
// newer than any this process knows (ErrUnknownVersion) is retried, since another process may
// just have registered it.
func (r *Registry) UpcastMiddleware() jetbus.HandlerMiddleware {
	return func(next jetbus.Handler) jetbus.Handler {
		return func(ctx context.Context, d *jetbus.Delivery) error {
			if r.isClosed() {
				return errRegistryClosed
			}
			if d.Event == nil || d.Tombstone() {
				return next(ctx, d)
			}
			if _, err := r.entryFor(d.Topic, 0); err != nil {
				return next(ctx, d) // no schema: nothing to normalize
			}
			from := 1
			if h := d.Header(jetbus.HeaderSchemaVersion); h != "" {
				n, err := strconv.Atoi(h)
				if err != nil || n < 1 {
					return jetbus.Permanent(fmt.Errorf("%w: %s: bad %s header %q", ErrUnknownVersion, d.Topic, jetbus.HeaderSchemaVersion, h))
				}
				from = n
			}
			payload, latest, err := r.Upcast(ctx, d.Topic, from, d.Payload)
			if err != nil {
				if jetbus.IsPermanent(err) || isRetryable(err) {
					return err
				}
				return jetbus.Permanent(err)
			}
			if err := r.Validate(ctx, d.Topic, latest, payload); err != nil {
				return jetbus.Permanent(err)
			}
			if latest == from {
				return next(ctx, d)
			}
			ev := *d.Event
			ev.Payload = payload
			ev.Headers = maps.Clone(d.Headers)
			ev.SetHeader(jetbus.HeaderSchemaVersion, strconv.Itoa(latest))
			ev.SetHeader(HeaderUpcastedFrom, strconv.Itoa(from))
			nd := *d
			nd.Event = &ev
			return next(ctx, &nd)
		}
	}
}

// isRetryable reports errors of the upcast path that may succeed later.
func isRetryable(err error) bool {
	return errors.Is(err, ErrUnknownVersion)
}
