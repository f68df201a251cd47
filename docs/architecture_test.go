// Package docs holds the project's design documents; its test keeps
// architecture.md's import graph true to the code.
package docs

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/gotune/gotune"

// TestImportGraphIsDocumented: the import graph that architecture.md draws
// ("The direction of imports") is the code's, package for package: every
// package but the benchmark and example programs is in it, with exactly
// the project's packages it imports. A change that adds an import, a
// package or a cycle-free shortcut between layers fails here until the
// document says so, and says why.
func TestImportGraphIsDocumented(t *testing.T) {
	real := importGraph(t, "..")
	doc := documentedGraph(t, "architecture.md")
	for _, pkg := range slices.Sorted(maps.Keys(real)) {
		want, ok := doc[pkg]
		if !ok {
			t.Errorf("package %s (imports %s) is not in architecture.md's import graph", pkg, list(real[pkg]))
			continue
		}
		if got := list(real[pkg]); got != list(want) {
			t.Errorf("architecture.md says %s imports %s; the code imports %s", pkg, list(want), got)
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(doc)) {
		if _, ok := real[pkg]; !ok {
			t.Errorf("architecture.md's import graph names %s, which is no package", pkg)
		}
	}
}

// importGraph reads the imports of the non-test Go files under root: for
// each package (its folder, relative to root), the project's packages it
// imports. The benchmark and example programs are left out.
func importGraph(t *testing.T, root string) map[string]map[string]bool {
	t.Helper()
	graph := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || rel == "bench" || rel == "examples") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		if graph[pkg] == nil {
			graph[pkg] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if dep, ok := strings.CutPrefix(p, module+"/"); ok {
				graph[pkg][dep] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return graph
}

// documentedGraph reads the first code block after the heading "The
// direction of imports" in the document at path: lines "a, b -> c, d" (or
// "-> nothing"), a line that starts with spaces going on with the one
// before.
func documentedGraph(t *testing.T, path string) map[string]map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	section, block := false, false
	for s := bufio.NewScanner(f); s.Scan(); {
		line := s.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line == "## The direction of imports"
		case section && strings.HasPrefix(line, "```"):
			if block {
				return parseGraph(t, lines)
			}
			block = true
		case block && strings.HasPrefix(line, " ") && len(lines) > 0:
			lines[len(lines)-1] += ", " + strings.TrimSpace(line)
		case block:
			lines = append(lines, line)
		}
	}
	t.Fatalf("%s has no code block under \"## The direction of imports\"", path)
	return nil
}

func parseGraph(t *testing.T, lines []string) map[string]map[string]bool {
	graph := map[string]map[string]bool{}
	for _, line := range lines {
		from, to, ok := strings.Cut(line, "->")
		if !ok {
			t.Fatalf("architecture.md's import graph: %q has no \"->\"", line)
		}
		deps := map[string]bool{}
		if to = strings.TrimSpace(to); to != "nothing" {
			for _, d := range strings.Split(to, ",") {
				if d = strings.TrimSpace(d); d != "" { // a line may end with a comma
					deps[d] = true
				}
			}
		}
		for _, p := range strings.Split(from, ",") {
			p = strings.TrimSpace(p)
			if _, dup := graph[p]; dup {
				t.Errorf("architecture.md's import graph has %s twice", p)
			}
			graph[p] = deps
		}
	}
	return graph
}

// list is a set of packages as the document writes it.
func list(set map[string]bool) string {
	if len(set) == 0 {
		return "nothing"
	}
	return strings.Join(slices.Sorted(maps.Keys(set)), ", ")
}
