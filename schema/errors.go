package schema

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jetbus/jetbus"
)

// Sentinel errors. Calls wrap them with detail; compare with errors.Is. A closed Registry
// returns jetbus.ErrClosed, a bad option jetbus.ErrInvalidOption.
var (
	// ErrIncompatible is returned by Compatible, Registry.Register, Registry.Check and
	// CheckDir when a schema is incompatible with the versions it is checked against. The
	// error is an *IncompatibleError that lists every reason.
	ErrIncompatible = errors.New("schema: incompatible")
	// ErrInvalid is returned by Registry.Validate, the publish middleware and the upcast
	// middleware (as jetbus.Permanent) when a payload does not validate. The error is a
	// *ValidationError that names the failing JSON pointers.
	ErrInvalid = errors.New("schema: payload does not validate")
	// ErrInvalidSchema is returned when a schema document is not JSON, not an object or
	// boolean, or not a valid JSON Schema (it does not compile).
	ErrInvalidSchema = errors.New("schema: invalid JSON Schema document")
	// ErrUnknownMode is returned by ParseMode, ParsePolicy and every call taking a Mode or a
	// Policy for a name that is not one of the known ones.
	ErrUnknownMode = errors.New("schema: unknown compatibility mode or policy")
	// ErrNoSchema is returned by the publish middleware of a strict registry for a topic
	// that has no schema, and by Registry.Latest and Registry.Validate for such a topic.
	ErrNoSchema = errors.New("schema: topic has no schema")
	// ErrVersionNotFound is returned by Registry.Get, Registry.Delete and Registry.Validate
	// for a version the topic does not have.
	ErrVersionNotFound = errors.New("schema: version not found")
	// ErrVersionConflict is returned by Registry.Register with ExpectVersion when the schema
	// would not become that version, and by PushDir when the registry holds a different
	// schema under a file's version.
	ErrVersionConflict = errors.New("schema: version conflict")
	// ErrUnknownVersion is returned by the upcast middleware for an event stamped with a
	// version the registry does not know (yet: the error is retried, since another process
	// may just have registered it), or with a deleted version newer than the latest (then it
	// is wrapped in jetbus.Permanent), and by the publish middleware for an explicit
	// x-schema-version that is not a live version.
	ErrUnknownVersion = errors.New("schema: unknown schema version")
	// ErrMissingUpcaster is returned (as jetbus.Permanent) by the upcast middleware when no
	// Go upcaster and no declarative upcaster leads from one version of an event to the next.
	ErrMissingUpcaster = errors.New("schema: missing upcaster")
	// ErrUpcast is returned when an upcaster fails or a declarative operation cannot be
	// applied (a pointer that does not resolve where it must).
	ErrUpcast = errors.New("schema: upcast failed")
	// ErrInvalidUpcaster is returned for a declarative operation that is malformed (unknown
	// op, bad JSON pointer, missing from or value) and by AddUpcaster for a bad hop.
	ErrInvalidUpcaster = errors.New("schema: invalid upcaster")
)

// errRegistryClosed is returned by the calls and middlewares of a closed Registry.
var errRegistryClosed = fmt.Errorf("schema: registry: %w", jetbus.ErrClosed)

// Reason is one difference that makes a schema incompatible.
type Reason struct {
	// Pointer is the JSON pointer, in the candidate schema, of the keyword or subschema
	// that differs.
	Pointer string `json:"pointer"`
	// Rule names the kind of difference, e.g. "REQUIRED_PROPERTY_ADDED" or "TYPE_NARROWED".
	Rule string `json:"rule"`
	// Detail says what changed, in words.
	Detail string `json:"detail"`
	// Direction is "backward" (the candidate cannot read data written with Version) or
	// "forward" (readers of Version cannot read data written with the candidate).
	Direction string `json:"direction"`
	// Version is the version the candidate was compared with: in Compatible the 1-based
	// position in previous, in the Registry the version number.
	Version int `json:"version"`
}

func (r Reason) String() string {
	p := r.Pointer
	if p == "" {
		p = "/"
	}
	return fmt.Sprintf("%s: %s (%s vs version %d): %s", p, r.Rule, r.Direction, r.Version, r.Detail)
}

// IncompatibleError lists every reason a schema is incompatible. It matches ErrIncompatible.
type IncompatibleError struct {
	// Topic is set when the check was made by the Registry or on schema files.
	Topic   string
	Mode    Mode
	Reasons []Reason
}

func (e *IncompatibleError) Error() string {
	var b strings.Builder
	b.WriteString("schema: incompatible")
	if e.Topic != "" {
		fmt.Fprintf(&b, " for topic %q", e.Topic)
	}
	fmt.Fprintf(&b, " under %s: ", e.Mode)
	for i, r := range e.Reasons {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(r.String())
	}
	return b.String()
}

// Is reports whether target is ErrIncompatible.
func (e *IncompatibleError) Is(target error) bool { return target == ErrIncompatible }

// Failure is one place where a payload does not validate.
type Failure struct {
	// Pointer is the JSON pointer of the failing value in the payload ("" is the root).
	Pointer string `json:"pointer"`
	// Keyword is the JSON pointer of the failing keyword in the schema.
	Keyword string `json:"keyword"`
	Message string `json:"message"`
}

// ValidationError lists where a payload fails its schema. It matches ErrInvalid.
type ValidationError struct {
	Topic    string
	Version  int
	Failures []Failure
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schema: payload does not validate against %s v%d: ", e.Topic, e.Version)
	for i, f := range e.Failures {
		if i > 0 {
			b.WriteString("; ")
		}
		p := f.Pointer
		if p == "" {
			p = "/"
		}
		fmt.Fprintf(&b, "%s: %s", p, f.Message)
	}
	return b.String()
}

// Is reports whether target is ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }
