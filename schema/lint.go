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
// for publish calls and reports invalid topic names and subjects, topics without a schema
// (with SchemasDir) and header keys the wire contract does not allow.
//
// What a publish names follows the wire contract (README, "The wire contract"): the Bus
// (Publish(ctx, topic, …)) takes a topic; a plain NATS or JetStream client publishes to a
// subject: a partition's subject "<topic>.p<n>" (keyed topics "<topic>.p<n>.<token>"), or
// "in.<topic>" through ingress. A subject-shaped string is therefore checked as a subject
// wherever it appears. A bare topic name is right for the Bus and wrong as a subject (no
// stream listens on it): in Go it is taken as the Bus's topic when it follows a context
// argument (Publish(ctx, topic, …)) and as a subject when it is the first argument
// (nc.Publish(subject, data)); in scripts, where only NATS clients publish, it is a subject.
//
// In Go files (go/ast) it checks string literals and constants of the same package passed to
// a method named Publish, PublishMsg or PublishAsync, and the keys of map literals passed to
// WithHeaders (custom "x-" headers only: the mapped ones are options). In .js, .ts, .mjs,
// .cjs, .jsx, .tsx and .py files it finds publish("…") and publish('…') calls and the keys of
// headers: {…} / headers={…} literals with a regular expression; there the wire contract's
// own headers (Nats-Msg-Id, x-key, x-ts, x-sid, x-caused-by, x-tags, x-schema-version,
// content-type) are allowed too. Directories named vendor, node_modules and testdata, and
// hidden ones, are skipped unless named explicitly.
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
	l.schemaOf(file, line, t)
}

// schemaOf reports a valid topic without a schema (with SchemasDir).
func (l *linter) schemaOf(file string, line int, t string) {
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

// wireHeaders are the headers a client outside jetbus sets to give an event its fields.
var wireHeaders = map[string]bool{
	jetbus.HeaderMsgID: true, jetbus.HeaderKey: true, jetbus.HeaderTS: true, jetbus.HeaderSID: true,
	jetbus.HeaderCausedBy: true, jetbus.HeaderTags: true, jetbus.HeaderSchemaVersion: true,
	jetbus.HeaderContentType: true, jetbus.HeaderTraceParent: true, jetbus.HeaderTraceState: true, jetbus.HeaderBaggage: true,
}

// wireHeader checks a header key set by a client outside jetbus.
func (l *linter) wireHeader(file string, line int, h string) {
	if !wireHeaders[h] {
		l.header(file, line, h)
	}
}

// subject checks the subject a plain NATS client publishes to.
func (l *linter) subject(file string, line int, s string) {
	if t, ok := strings.CutPrefix(s, "in."); ok {
		if _, _, _, sub := jetbus.ParseSubject(t); sub {
			l.add(file, line, "ingress subject %q names a partition: publish to in.<topic>, ingress partitions by key", s)
			return
		}
		if err := jetbus.ValidateTopic(t); err != nil {
			l.add(file, line, "ingress subject %q: invalid topic: %v", s, err)
			return
		}
		l.schemaOf(file, line, t)
		return
	}
	if t, _, _, ok := jetbus.ParseSubject(s); ok {
		l.schemaOf(file, line, t)
		return
	}
	if jetbus.ValidateTopic(s) == nil {
		l.add(file, line, "publish to the bare topic %q: no stream listens there; publish to %s.p<n> (n = the partition of the key) or to in.%s through ingress", s, s, s)
		return
	}
	l.add(file, line, "invalid subject %q: not <topic>.p<n>, <topic>.p<n>.<key token> or in.<topic>", s)
}

// subjectShaped reports whether s names a partition's subject or an ingress subject.
func subjectShaped(s string) bool {
	if strings.HasPrefix(s, "in.") {
		return true
	}
	_, _, _, ok := jetbus.ParseSubject(s)
	return ok
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
				case "Publish", "PublishAsync", "PublishMsg":
					for i, arg := range call.Args {
						if i > 1 {
							break
						}
						s, ok := stringValue(arg, consts)
						if !ok {
							continue
						}
						line := fset.Position(arg.Pos()).Line
						switch {
						case subjectShaped(s), i == 0:
							l.subject(file, line, s) // nc.Publish(subject, data)
						default:
							l.topic(file, line, s) // bus.Publish(ctx, topic, payload)
						}
						break
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
	scriptPublish = regexp.MustCompile(`\bpublish\s*\(\s*(?:"([^"\\\n]*)"|'([^'\\\n]*)')\s*[,)]`)
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
		l.subject(p, line(start), src[start:end])
	}
	for _, m := range scriptHeaders.FindAllStringSubmatchIndex(src, -1) {
		body := src[m[2]:m[3]]
		for _, k := range scriptKey.FindAllStringSubmatchIndex(body, -1) {
			start, end := k[2], k[3]
			if start < 0 {
				start, end = k[4], k[5]
			}
			l.wireHeader(p, line(m[2]+start), body[start:end])
		}
	}
	return nil
}
