package schema

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// noLoader refuses every remote reference: a schema must be self-contained, so that what
// validates does not depend on what a URL serves.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("remote references are not supported (%s): a schema must be self-contained", url)
}

// compile compiles a decoded schema document. Draft 2020-12 applies unless $schema says
// otherwise; format is an annotation.
func compile(url string, doc any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidSchema, oneLine(err))
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidSchema, oneLine(err))
	}
	return s, nil
}

// oneLine renders a multi-line error on one line, so "file: message" reports stay one line
// per problem.
func oneLine(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, " ")
}

// Compile checks that doc is a valid JSON Schema and returns a Validator for it. The error
// wraps ErrInvalidSchema.
func Compile(doc []byte) (*Validator, error) {
	v, err := decodeJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	switch v.(type) {
	case map[string]any, bool:
	default:
		return nil, fmt.Errorf("%w: a schema is a JSON object or boolean, got %s", ErrInvalidSchema, jsonKind(v))
	}
	s, err := compile("mem:///schema.json", v)
	if err != nil {
		return nil, err
	}
	return &Validator{s: s}, nil
}

// Validator validates payloads against one compiled schema. It is safe for concurrent use.
type Validator struct {
	topic   string
	version int
	s       *jsonschema.Schema
}

// Validate checks a JSON payload. It returns nil, a *ValidationError (matching ErrInvalid)
// naming every failing JSON pointer, or an error wrapping ErrInvalid when the payload is not
// JSON at all.
func (v *Validator) Validate(payload []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return &ValidationError{Topic: v.topic, Version: v.version, Failures: []Failure{{Message: "not valid JSON: " + err.Error()}}}
	}
	return v.validateValue(inst)
}

func (v *Validator) validateValue(inst any) error {
	err := v.s.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ValidationError{Topic: v.topic, Version: v.version, Failures: []Failure{{Message: err.Error()}}}
	}
	out := &ValidationError{Topic: v.topic, Version: v.version}
	collectFailures(ve, &out.Failures)
	sort.SliceStable(out.Failures, func(i, j int) bool { return out.Failures[i].Pointer < out.Failures[j].Pointer })
	return out
}

func collectFailures(e *jsonschema.ValidationError, out *[]Failure) {
	if len(e.Causes) == 0 {
		*out = append(*out, Failure{
			Pointer: pointer(e.InstanceLocation),
			Keyword: pointer(e.ErrorKind.KeywordPath()),
			Message: e.ErrorKind.LocalizedString(printer),
		})
		return
	}
	for _, c := range e.Causes {
		collectFailures(c, out)
	}
}

func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePtr(t))
	}
	return b.String()
}
