package schema

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jetbus/jetbus"
)

// LintOptions configures Lint.
type LintOptions struct {
	// SchemasDir, when set, is a schema directory (see LoadDir): a published topic without a
	// schema there is reported. A topic "<t>.v<N>" is covered by version N of <t>.
	SchemasDir string
	// IncludeTests lints _test.go files too.
	IncludeTests bool
}

// Finding is one lint finding, reported as "file:line: message".
type Finding struct {
	File    string
	Line    int
	Message string
}

func (f Finding) String() string { return fmt.Sprintf("%s:%d: %s", f.File, f.Line, f.Message) }

// Lint scans paths (files or directories, walked recursively; a trailing "/..." is accepted)
// for publish calls and reports invalid topic names, topics without a schema (with
// SchemasDir) and custom header keys that are not valid "x-" names.
//
// In Go files (go/ast) it checks string literals and constants of the same package passed as
// the topic of a method named Publish or PublishAsync (the first argument if it is a string,
// else the second, so both Publish(ctx, topic, …) and Publish(subject, …) are covered) and
// the keys of map literals passed to WithHeaders. In .js, .ts, .mjs, .cjs, .jsx, .tsx and .py
// files it finds publish("…") and publish('…') calls and the keys of headers: {…} /
// headers={…} literals with a regular expression. Directories named vendor, node_modules and
// testdata, and hidden ones, are skipped unless named explicitly.
func Lint(opts LintOptions, paths ...string) ([]Finding, error) {
	l := &linter{opts: opts}
	if opts.SchemasDir != "" {
		s, err := topicsWithSchemas(opts.SchemasDir)
		if err != nil {
			return nil, err
		}
		l.schemas = s
	}
	goDirs := map[string][]string{}
	for _, root := range paths {
		root = strings.TrimSuffix(strings.TrimSuffix(root, "/..."), "...")
		if root == "" {
			root = "."
		}
		info, err := os.Stat(root)
		if err != nil {
			return nil, fmt.Errorf("schema: lint: %w", err)
		}
		if !info.IsDir() {
			if err := l.file(root, goDirs); err != nil {
				return nil, err
			}
			continue
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				name := d.Name()
				if p != root && (strings.HasPrefix(name, ".") || name == "vendor" || name == "node_modules" || name == "testdata") {
					return filepath.SkipDir
				}
				return nil
			}
			return l.file(p, goDirs)
		})
		if err != nil {
			return nil, fmt.Errorf("schema: lint: %w", err)
		}
	}
	dirs := make([]string, 0, len(goDirs))
	for d := range goDirs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if err := l.goPackage(goDirs[d]); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(l.out, func(i, j int) bool {
		if l.out[i].File != l.out[j].File {
			return l.out[i].File < l.out[j].File
		}
		return l.out[i].Line < l.out[j].Line
	})
	return l.out, nil
}

type linter struct {
	opts    LintOptions
	schemas map[string]map[int]bool
	out     []Finding
}

var scriptExt = map[string]bool{".js": true, ".ts": true, ".mjs": true, ".cjs": true, ".jsx": true, ".tsx": true, ".py": true}

func (l *linter) file(p string, goDirs map[string][]string) error {
	ext := filepath.Ext(p)
	switch {
	case ext == ".go":
		if strings.HasSuffix(p, "_test.go") && !l.opts.IncludeTests {
			return nil
		}
		d := filepath.Dir(p)
		goDirs[d] = append(goDirs[d], p)
	case scriptExt[ext]:
		return l.script(p)
	}
	return nil
}

func (l *linter) add(file string, line int, format string, args ...any) {
	l.out = append(l.out, Finding{File: file, Line: line, Message: fmt.Sprintf(format, args...)})
}

func (l *linter) topic(file string, line int, t string) {
	if err := jetbus.ValidateTopic(t); err != nil {
		l.add(file, line, "invalid topic %q: %v", t, err)
		return
	}
	if l.schemas == nil {
		return
	}
	if l.schemas[t] != nil {
		return
	}
	if m := versionedTopic.FindStringSubmatch(t); m != nil {
		n, _ := strconv.Atoi(m[2])
		if l.schemas[m[1]][n] {
			return
		}
	}
	l.add(file, line, "topic %q has no schema in %s", t, l.opts.SchemasDir)
}

func (l *linter) header(file string, line int, h string) {
	if err := jetbus.ValidateHeaderName(h); err != nil {
		l.add(file, line, "header key %q is not a valid custom header: %v", h, err)
	}
}

// goPackage lints the Go files of one directory, resolving constants across them.
func (l *linter) goPackage(paths []string) error {
	fset := token.NewFileSet()
	byPkg := map[string][]*ast.File{}
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			l.add(p, lineOf(err), "cannot parse: %v", err)
			continue
		}
		byPkg[f.Name.Name] = append(byPkg[f.Name.Name], f)
	}
	for _, files := range byPkg {
		consts := stringConsts(files)
		for _, f := range files {
			file := fset.Position(f.Pos()).Filename
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "Publish", "PublishAsync":
					for i, arg := range call.Args {
						if i > 1 {
							break
						}
						if s, ok := stringValue(arg, consts); ok {
							l.topic(file, fset.Position(arg.Pos()).Line, s)
							break
						}
					}
				case "WithHeaders":
					for _, arg := range call.Args {
						lit, ok := arg.(*ast.CompositeLit)
						if !ok {
							continue
						}
						for _, elt := range lit.Elts {
							kv, ok := elt.(*ast.KeyValueExpr)
							if !ok {
								continue
							}
							if s, ok := stringValue(kv.Key, consts); ok {
								l.header(file, fset.Position(kv.Key.Pos()).Line, s)
							}
						}
					}
				}
				return true
			})
		}
	}
	return nil
}

func lineOf(err error) int {
	if list, ok := err.(scanner.ErrorList); ok && len(list) > 0 {
		return list[0].Pos.Line
	}
	return 1
}

// stringConsts collects the package's string constants (literals, concatenations of
// literals and other constants).
func stringConsts(files []*ast.File) map[string]string {
	exprs := map[string]ast.Expr{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			gd, ok := n.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				return true
			}
			for _, spec := range gd.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						exprs[name.Name] = vs.Values[i]
					}
				}
			}
			return true
		})
	}
	out := map[string]string{}
	for changed := true; changed; {
		changed = false
		for name, e := range exprs {
			if _, done := out[name]; done {
				continue
			}
			if s, ok := stringValue(e, out); ok {
				out[name] = s
				changed = true
			}
		}
	}
	return out
}

// stringValue evaluates a string literal, a known constant or a concatenation of those.
func stringValue(e ast.Expr, consts map[string]string) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(x.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[x.Name]
		return s, ok
	case *ast.ParenExpr:
		return stringValue(x.X, consts)
	case *ast.BinaryExpr:
		if x.Op != token.ADD {
			return "", false
		}
		a, ok1 := stringValue(x.X, consts)
		b, ok2 := stringValue(x.Y, consts)
		return a + b, ok1 && ok2
	}
	return "", false
}

var (
	scriptPublish = regexp.MustCompile(`\bpublish\s*\(\s*(?:"([^"\\\n]*)"|'([^'\\\n]*)')`)
	scriptHeaders = regexp.MustCompile(`\bheaders\s*[:=]\s*\{([^}]*)\}`)
	scriptKey     = regexp.MustCompile(`(?:"([^"\\\n]*)"|'([^'\\\n]*)')\s*:`)
)

func (l *linter) script(p string) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("schema: lint: %w", err)
	}
	src := string(data)
	line := func(off int) int { return strings.Count(src[:off], "\n") + 1 }
	for _, m := range scriptPublish.FindAllStringSubmatchIndex(src, -1) {
		start, end := m[2], m[3]
		if start < 0 {
			start, end = m[4], m[5]
		}
		l.topic(p, line(start), src[start:end])
	}
	for _, m := range scriptHeaders.FindAllStringSubmatchIndex(src, -1) {
		body := src[m[2]:m[3]]
		for _, k := range scriptKey.FindAllStringSubmatchIndex(body, -1) {
			start, end := k[2], k[3]
			if start < 0 {
				start, end = k[4], k[5]
			}
			l.header(p, line(m[2]+start), body[start:end])
		}
	}
	return nil
}
