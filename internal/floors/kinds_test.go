package floors_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/internal/testenv"
)

// kindPlaces are where a decision by proxy kind may be made: the one table
// of kinds and the kinds' own packages (a folder ending in "/" covers the
// folder and everything below it).
var kindPlaces = []string{"xds/kinds.go", "xds/sidecar/", "xds/grpc/"}

// kindNames are the names that denote a proxy kind: the kinds (model's,
// which xds re-exports) and the node GENERATOR that selects the proxyless
// one; kindPackages the packages whose names they are.
var (
	kindNames    = map[string]bool{"KindSidecar": true, "KindGRPC": true, "GeneratorGRPC": true}
	kindPackages = map[string]bool{module + "model": true, module + "xds": true, module + "xds/node": true, module + "agents/bootstrap": true}
	// kindLiterals are the kinds' names as literals, compared with a Kind
	// or Generator field.
	kindLiterals = map[string]bool{`"grpc"`: true, `"sidecar"`: true}
)

// TestNoKindBranchOutsideTheKinds: no Go file outside the kind table and the
// kind packages compares a proxy kind or switches on one. What differs
// between kinds is a row of the table (xds/kinds.go) or a field the kind
// declares (model.Reads); everything else serves every kind alike, so a
// new kind is one package and one row.
func TestNoKindBranchOutsideTheKinds(t *testing.T) {
	root := testenv.RepoRoot(t)
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			// tools/ are modules of their own; testdata holds no product code.
			if rel == "tools" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || kindPlace(rel) {
			return nil
		}
		files++
		for _, at := range kindBranches(t, path, rel) {
			t.Errorf("%s: decides by proxy kind outside the kind table and the kind packages %v", at, kindPlaces)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("checked %d files: the walk saw too few", files)
	}
}

func kindPlace(rel string) bool {
	for _, p := range kindPlaces {
		if rel == p || strings.HasSuffix(p, "/") && strings.HasPrefix(rel, p) {
			return true
		}
	}
	return false
}

// kindBranches returns the positions in a file of comparisons with a proxy
// kind and of switch cases on one.
func kindBranches(t *testing.T, path, rel string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	// The file's own package and its imports, by the name they go by.
	self := module + filepath.ToSlash(filepath.Dir(rel))
	imports := map[string]string{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndexByte(p, '/')+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imports[name] = p
	}
	isKind := func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.Ident:
			return kindNames[e.Name] && kindPackages[self]
		case *ast.SelectorExpr:
			x, ok := e.X.(*ast.Ident)
			return ok && kindNames[e.Sel.Name] && kindPackages[imports[x.Name]]
		}
		return false
	}
	isKindField := func(e ast.Expr) bool {
		s, ok := e.(*ast.SelectorExpr)
		return ok && (s.Sel.Name == "Kind" || s.Sel.Name == "Generator")
	}
	isKindLiteral := func(e ast.Expr) bool {
		l, ok := e.(*ast.BasicLit)
		return ok && l.Kind == token.STRING && kindLiterals[l.Value]
	}
	var out []string
	at := func(n ast.Node) {
		pos := fset.Position(n.Pos())
		out = append(out, rel+":"+strconv.Itoa(pos.Line)+":"+strconv.Itoa(pos.Column))
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				return true
			}
			if isKind(n.X) || isKind(n.Y) ||
				isKindField(n.X) && isKindLiteral(n.Y) || isKindField(n.Y) && isKindLiteral(n.X) {
				at(n)
			}
		case *ast.SwitchStmt:
			for _, s := range n.Body.List {
				for _, e := range s.(*ast.CaseClause).List {
					if isKind(e) || n.Tag != nil && isKindField(n.Tag) && isKindLiteral(e) {
						at(e)
					}
				}
			}
		}
		return true
	})
	return out
}
