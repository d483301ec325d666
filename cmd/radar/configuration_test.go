package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/docs"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/upstream"
)

// repoRoot is the repository's root, relative to this package's directory.
const repoRoot = "../.."

// configurationDoc is the document whose tables list every variable.
const configurationDoc = "docs/configuration.md"

// envLoader is the function that reads the service's settings through the
// getenv it is given. Its reads are recorded at run time (the names it
// builds, such as BUILDRISK_KEY_<P>, are not in the source as literals), so
// it alone may read a variable whose name the source scan cannot tell.
const envLoader = "LoadEnv"

// placeholders gives the values of each placeholder of
// docs/configuration.md, from the code that defines them.
func placeholders() map[string][]string {
	values := map[string][]string{}
	for _, p := range upstream.Providers {
		values["P"] = append(values["P"], string(p))
	}
	for _, def := range jobset.Catalog().All() {
		values["JOB"] = append(values["JOB"], strings.ToUpper(def.Name()))
	}
	for _, r := range riskrule.Set {
		values["NAME"] = append(values["NAME"], r.Name)
	}
	return values
}

// envRead is one place the source reads an environment variable.
type envRead struct {
	pos string // file:line
	// name is the variable when the source tells it (a literal, a constant,
	// or an argument of a helper that passes its parameter on).
	name string
	// pattern matches the variable when the source builds its name from
	// literal parts and values known only at run time ("BUILDRISK_" + p).
	pattern *regexp.Regexp
	// fn and dir are the function the read is in and its package's
	// directory.
	fn, dir string
}

// envReaderFunc is a function that reads the variable its argument arg
// names: os.Getenv, or a helper that passes a parameter on to one.
type envReaderFunc struct {
	pkg  string // directory; "" for the standard library and getenv params
	name string
	arg  int
}

// goFile is a parsed source file with its package directory.
type goFile struct {
	path string
	dir  string
	file *ast.File
	fset *token.FileSet
}

// parseModuleSources parses every .go file under root, tests included,
// skipping dependency and cache directories.
func parseModuleSources(t *testing.T, root string) []goFile {
	t.Helper()

	fset := token.NewFileSet()
	var files []goFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".cache", "node_modules", "testdata", "bin", ".radar":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, goFile{path: path, dir: filepath.Dir(path), file: f, fset: fset})
		return nil
	})
	require.NoError(t, err)
	return files
}

// scanEnvReads finds every read of an environment variable in files:
// calls of os.Getenv, os.LookupEnv and syscall.Getenv, of a function value
// named getenv or lookupEnv (the env-loading helper's parameter), and of any
// function that passes one of its parameters on to one of those. It returns
// the reads whose name or pattern it can tell, and the positions of those
// it cannot (a name computed at run time outside LoadEnv).
func scanEnvReads(files []goFile) (reads []envRead, unknown []envRead) {
	// String constants: by package directory and name, and by name alone
	// for pkg.Name selectors.
	consts := map[string]map[string]string{}
	constsByName := map[string][]string{}
	for _, f := range files {
		ast.Inspect(f.file, func(n ast.Node) bool {
			gd, ok := n.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				return true
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							continue
						}
						if consts[f.dir] == nil {
							consts[f.dir] = map[string]string{}
						}
						consts[f.dir][id.Name] = v
						constsByName[id.Name] = append(constsByName[id.Name], v)
					}
				}
			}
			return true
		})
	}

	// parts splits an argument into literal parts and run-time values
	// ("" for each of those); ok is false when no part is literal.
	var parts func(dir string, e ast.Expr) (p []string, ok bool)
	parts = func(dir string, e ast.Expr) ([]string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				v, err := strconv.Unquote(e.Value)
				return []string{v}, err == nil && v != ""
			}
		case *ast.Ident:
			if v, ok := consts[dir][e.Name]; ok {
				return []string{v}, v != ""
			}
		case *ast.SelectorExpr:
			if vs := slices.Compact(slices.Sorted(slices.Values(constsByName[e.Sel.Name]))); len(vs) == 1 {
				return []string{vs[0]}, vs[0] != ""
			}
		case *ast.ParenExpr:
			return parts(dir, e.X)
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				l, lok := parts(dir, e.X)
				r, rok := parts(dir, e.Y)
				if !lok {
					l = []string{""}
				}
				if !rok {
					r = []string{""}
				}
				return append(l, r...), lok || rok
			}
		}
		return nil, false
	}
	// resolve turns an argument into a name, a pattern, or neither.
	resolve := func(dir string, e ast.Expr) (name string, pattern *regexp.Regexp) {
		p, ok := parts(dir, e)
		if !ok {
			return "", nil
		}
		if !slices.Contains(p, "") {
			return strings.Join(p, ""), nil
		}
		for i, part := range p {
			if part == "" {
				p[i] = "[A-Z0-9_]+"
			} else {
				p[i] = regexp.QuoteMeta(part)
			}
		}
		return "", regexp.MustCompile("^" + strings.Join(p, "") + "$")
	}

	// Readers, grown to a fixed point by the helpers that pass a parameter
	// on to a reader.
	readers := map[envReaderFunc]bool{
		{"os", "Getenv", 0}: true, {"os", "LookupEnv", 0}: true, {"syscall", "Getenv", 0}: true,
		{"", "getenv", 0}: true, {"", "lookupEnv", 0}: true,
	}
	readerArg := func(f goFile, call *ast.CallExpr) (int, bool) {
		switch fn := call.Fun.(type) {
		case *ast.Ident:
			for _, pkg := range []string{"", f.dir} {
				for r := range readers {
					if r.pkg == pkg && r.name == fn.Name {
						return r.arg, true
					}
				}
			}
		case *ast.SelectorExpr:
			if x, ok := fn.X.(*ast.Ident); ok && (x.Name == "os" || x.Name == "syscall") {
				r := envReaderFunc{x.Name, fn.Sel.Name, 0}
				return 0, readers[r]
			}
			for r := range readers {
				if r.pkg != "" && r.pkg != "os" && r.pkg != "syscall" && r.name == fn.Sel.Name {
					return r.arg, true
				}
			}
		}
		return 0, false
	}
	type site struct {
		f    goFile
		fn   *ast.FuncDecl
		call *ast.CallExpr
		arg  int
	}
	for {
		var sites []site
		for _, f := range files {
			for _, decl := range f.file.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					if arg, ok := readerArg(f, call); ok && arg < len(call.Args) {
						sites = append(sites, site{f, fd, call, arg})
					}
					return true
				})
			}
		}
		grew := false
		reads, unknown = nil, nil
		for _, s := range sites {
			pos := s.f.fset.Position(s.call.Pos())
			r := envRead{pos: filepath.ToSlash(pos.Filename) + ":" + strconv.Itoa(pos.Line), fn: s.fn.Name.Name, dir: filepath.ToSlash(s.f.dir)}
			arg := s.call.Args[s.arg]
			if id, ok := arg.(*ast.Ident); ok {
				if i := paramIndex(s.fn, id.Name); i >= 0 {
					h := envReaderFunc{s.f.dir, s.fn.Name.Name, i}
					if !readers[h] {
						readers[h] = true
						grew = true
					}
					continue // the helper's callers are the reads
				}
			}
			r.name, r.pattern = resolve(s.f.dir, arg)
			if r.name == "" && r.pattern == nil {
				unknown = append(unknown, r)
				continue
			}
			reads = append(reads, r)
		}
		if !grew {
			return reads, unknown
		}
	}
}

// paramIndex returns the position of fd's parameter name, or -1.
func paramIndex(fd *ast.FuncDecl, name string) int {
	i := 0
	for _, field := range fd.Type.Params.List {
		if len(field.Names) == 0 {
			i++
			continue
		}
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

// loadEnvReads returns every name config.LoadEnv asks its getenv for when no
// variable is set.
func loadEnvReads(t *testing.T) []string {
	t.Helper()

	var mu sync.Mutex
	seen := map[string]bool{}
	_, err := config.LoadEnv(func(name string) string {
		mu.Lock()
		defer mu.Unlock()
		seen[name] = true
		return ""
	})
	require.NoError(t, err)
	return slices.Sorted(func(yield func(string) bool) {
		for n := range seen {
			if !yield(n) {
				return
			}
		}
	})
}

// The scanner finds literal, constant, concatenated and helper-forwarded
// reads, and reports the reads whose name it cannot tell.
func TestScanEnvReads(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	src := `package x

import "os"

const nameConst = "X_CONST"

func envInt(tb any, name string, def int) int { _ = os.Getenv(name); return def }

func read(getenv func(string) string, p string) {
	_ = os.Getenv("X_LITERAL")
	_, _ = os.LookupEnv(nameConst)
	_ = getenv("X_" + p + "_URL")
	_ = envInt(nil, "X_HELPER", 1)
	_ = os.Getenv(p)
}

func loadEnv(getenv func(string) string) {
	for _, n := range []string{"a"} {
		_ = getenv(n)
	}
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644))
	reads, unknown := scanEnvReads(parseModuleSources(t, dir))
	var names, patterns []string
	for _, r := range reads {
		if r.pattern != nil {
			patterns = append(patterns, r.pattern.String())
		} else {
			names = append(names, r.name)
		}
	}
	sort.Strings(names)
	require.Equal(t, []string{"X_CONST", "X_HELPER", "X_LITERAL"}, names)
	require.Equal(t, []string{"^X_[A-Z0-9_]+_URL$"}, patterns)
	// read's os.Getenv(p) is a helper read (p is its parameter) whose
	// callers pass nothing; loadEnv's getenv(n) can't be told.
	require.Len(t, unknown, 1)
	require.Equal(t, "loadEnv", unknown[0].fn)
}

// docs/configuration.md lists exactly the variables the code reads: a
// variable read but not listed, or listed but never read, fails.
func TestConfigurationDocumentsEveryVariable(t *testing.T) {
	t.Parallel()

	data, err := os.ReadFile(filepath.Join(repoRoot, configurationDoc))
	require.NoError(t, err)
	vars := docs.Variables(string(data))
	require.NotEmpty(t, vars, "%s has no variable table", configurationDoc)

	values := placeholders()
	documented := map[string]string{} // concrete name -> row
	for _, v := range vars {
		names, ok := docs.Expand(v.Name, values)
		require.True(t, ok, "%s: %s uses a placeholder (%v) that placeholders() in this test does not define",
			configurationDoc, v.Name, docs.Placeholders(v.Name))
		for _, n := range names {
			require.NotContains(t, documented, n, "%s lists %s twice", configurationDoc, n)
			documented[n] = v.Name
		}
	}

	read := map[string]bool{}
	for _, n := range loadEnvReads(t) {
		read[n] = true
		if _, ok := documented[n]; !ok {
			t.Errorf("%s reads %s, which %s does not list", envLoader, n, configurationDoc)
		}
	}

	reads, unknown := scanEnvReads(parseModuleSources(t, repoRoot))
	for _, r := range unknown {
		if r.fn != envLoader || !strings.HasSuffix(r.dir, "internal/config") {
			t.Errorf("%s reads an environment variable whose name the source does not tell: "+
				"use a literal or constant (or read it in %s)", r.pos, envLoader)
		}
	}
	var patterns []*regexp.Regexp
	for _, r := range reads {
		if r.pattern != nil {
			patterns = append(patterns, r.pattern)
			matched := false
			for n := range documented {
				matched = matched || r.pattern.MatchString(n)
			}
			if !matched {
				t.Errorf("%s reads variables %s, none of which %s lists", r.pos, r.pattern, configurationDoc)
			}
			continue
		}
		read[r.name] = true
		if _, ok := documented[r.name]; !ok {
			t.Errorf("%s reads %s, which %s does not list", r.pos, r.name, configurationDoc)
		}
	}

	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for n := range documented {
			if !yield(n) {
				return
			}
		}
	}) {
		if read[n] || slices.ContainsFunc(patterns, func(re *regexp.Regexp) bool { return re.MatchString(n) }) {
			continue
		}
		t.Errorf("%s lists %s (row %s), which no code reads", configurationDoc, n, documented[n])
	}
}
