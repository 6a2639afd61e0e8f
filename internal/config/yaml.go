package config

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// pos is where a key or list element starts in the file.
type pos struct{ line, col int }

// yamlFile turns a YAML document into plain values (map[string]any, []any, string, nil) and
// remembers the position of every key path, so that errors found after koanf merged the file
// with the environment and the flags still name the line. Scalars stay text: the decoder
// parses them by the declared type, the same way for the file, the environment and flags.
type yamlFile struct {
	source string
	env    func(string) (string, bool)
	pos    map[string]pos
	errs   Errors
}

var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?`)

func (f *yamlFile) parse(data []byte) map[string]any {
	f.pos = map[string]pos{}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]any{} // an empty file
		}
		f.syntax(err)
		return nil
	}
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		f.errAt(&more, "", "a configuration file holds one YAML document; found a second")
	} else if !errors.Is(err, io.EOF) {
		f.syntax(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return map[string]any{}
	}
	if root.Kind != yaml.MappingNode {
		f.errAt(root, "", "the file must be a mapping of sections (nats:, topics:, …), not "+nodeKind(root))
		return nil
	}
	m, _ := f.plain(root, "").(map[string]any)
	return m
}

func (f *yamlFile) syntax(err error) {
	msg := err.Error()
	e := &Error{Source: f.source}
	if sm := yamlLine.FindStringSubmatch(msg); sm != nil {
		e.Line, _ = strconv.Atoi(sm[1])
		if e.Line > 0 {
			e.Column = 1
		}
		msg = msg[len(sm[0]):]
	}
	e.Message = "YAML: " + msg
	f.errs = append(f.errs, e)
}

func (f *yamlFile) errAt(n *yaml.Node, path, msg string) {
	f.errs = append(f.errs, &Error{Source: f.source, Line: n.Line, Column: n.Column, Path: path, Message: msg})
}

func (f *yamlFile) plain(n *yaml.Node, path string) any {
	switch n.Kind {
	case yaml.AliasNode:
		return f.plain(n.Alias, path)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				f.errAt(k, path, "a key must be a plain string, not "+nodeKind(k))
				continue
			}
			kp := joinKey(path, k.Value)
			if k.Value == "<<" {
				f.errAt(k, kp, "YAML merge keys (<<) are not supported; repeat the keys")
				continue
			}
			if _, dup := m[k.Value]; dup {
				f.errAt(k, kp, fmt.Sprintf("duplicate key %q", k.Value))
				continue
			}
			f.pos[kp] = pos{k.Line, k.Column}
			m[k.Value] = f.plain(v, kp)
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, e := range n.Content {
			ep := path + "[" + strconv.Itoa(i) + "]"
			f.pos[ep] = pos{e.Line, e.Column}
			l[i] = f.plain(e, ep)
		}
		return l
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil
		}
		s, err := interpolate(n.Value, f.env)
		if err != nil {
			f.errAt(n, path, err.Error())
			s = n.Value // reported once, not again as an empty value
		}
		return scalar{Text: s, Tag: n.ShortTag()}
	}
	return nil
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "an alias"
}

// interpolate replaces ${NAME} and ${NAME:default} with the environment's values; $${ is a
// literal ${. An unset variable without a default is an error.
func interpolate(s string, env func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1] + "${")
			s = s[i+2:]
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unclosed ${ in %q", s)
		}
		b.WriteString(s[:i])
		name, def, hasDef := strings.Cut(s[i+2:i+end], ":")
		v, ok := env(name)
		switch {
		case ok:
			b.WriteString(v)
		case hasDef:
			b.WriteString(def)
		default:
			return "", fmt.Errorf("environment variable %s is not set (write ${%s:default} for a default)", name, name)
		}
		s = s[i+end+1:]
	}
}

// scalar is a YAML scalar as written, with its resolved tag (!!str, !!int, !!bool, …): the
// decoder parses the text by the declared type, and keeps the tag's type for free-form values.
type scalar struct {
	Text string
	Tag  string
}

// typed returns v with scalars converted by their tags (for free-form values such as
// aggregation pipelines).
func typed(v any) any {
	switch r := v.(type) {
	case scalar:
		switch r.Tag {
		case "!!int":
			if i, err := strconv.ParseInt(r.Text, 0, 64); err == nil {
				return i
			}
		case "!!float":
			if x, err := strconv.ParseFloat(r.Text, 64); err == nil {
				return x
			}
		case "!!bool":
			if b, err := strconv.ParseBool(r.Text); err == nil {
				return b
			}
		}
		return r.Text
	case map[string]any:
		out := make(map[string]any, len(r))
		for k, e := range r {
			out[k] = typed(e)
		}
		return out
	case []any:
		out := make([]any, len(r))
		for i, e := range r {
			out[i] = typed(e)
		}
		return out
	}
	return v
}

// joinKey appends a mapping key to a path.
func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
