package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Error is one thing wrong with the configuration, where it was found.
type Error struct {
	// Source is where the value came from: the file's path, "env NAME" or "flag --name";
	// "" for a default.
	Source string
	// Line and Column locate the key in the file (0 when not from the file).
	Line, Column int
	// Path is the key path, e.g. "views[1].projection".
	Path string
	// Message says what is wrong.
	Message string
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.Source, e.Line, e.Column)
	case e.Source != "":
		fmt.Fprintf(&b, "%s: ", e.Source)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Errors is every error found, in file order; as an error it prints one per line.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

func (es Errors) sort() {
	slices.SortStableFunc(es, func(a, b *Error) int {
		// The file's errors by position first, then environment and flags.
		return cmp.Or(
			cmp.Compare(rank(a), rank(b)),
			cmp.Compare(a.Source, b.Source),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Path, b.Path),
		)
	})
}

func rank(e *Error) int {
	switch {
	case e.Line > 0:
		return 0
	case e.Source == "":
		return 1
	}
	return 2
}
