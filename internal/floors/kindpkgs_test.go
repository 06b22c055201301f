package floors_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/internal/testenv"
)

// kindSpecific are the names of what one proxy kind keeps and does, which
// live in the kind's package (xds/sidecar, xds/grpc), never in xds: the
// sidecar's scope parts, own parts and cluster memo, the proxyless
// group's on-demand part, incremental update, name table and WorkloadGroup
// resources, and each kind's part of the cache.
var kindSpecific = map[string]bool{
	"outboundPart": true, "outboundChange": true, "ownPart": true, "clusterMemo": true, "memoCluster": true,
	"sidecarCache": true, "sidecarPart": true, "sidecarGeneration": true, "sidecarOf": true, "outOf": true,
	"generateSidecar": true, "updateSidecar": true, "composeSidecar": true, "generateOutbound": true, "updateOutbound": true,
	"proxylessPart": true, "proxylessGeneration": true, "proxylessCache": true, "proxylessOf": true,
	"generateProxyless": true, "proxylessLookup": true, "shortNameListener": true, "withEndpoints": true,
	"nameTableResources": true, "workloadGroupResources": true, "updateNameTable": true, "refreshWorkloadGroups": true,
}

// TestKindsOwnTheirGeneration: package xds keeps watches, what was sent
// and the members; what a kind generates and keeps is its package's. No
// file of package xds declares a kind-specific name (kindSpecific), a
// type embedding the generation (a kind's generation with its part), or
// a method of a kind's part or cache (Lookup, TakeRefused; Build and Push
// together) but on the stand-in for an unknown kind.
func TestKindsOwnTheirGeneration(t *testing.T) {
	root := testenv.RepoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "xds", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		checked++
		rel, _ := filepath.Rel(root, path)
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		at := func(n ast.Node) string {
			return filepath.ToSlash(rel) + ":" + strings.SplitN(fset.Position(n.Pos()).String(), ":", 2)[1]
		}
		methods := map[string]map[string]bool{}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					if kindSpecific[d.Name.Name] {
						t.Errorf("%s: %s is kind-specific: it belongs in the kind's package", at(d), d.Name.Name)
					}
					continue
				}
				recv := receiverName(d.Recv.List[0].Type)
				if methods[recv] == nil {
					methods[recv] = map[string]bool{}
				}
				methods[recv][d.Name.Name] = true
				if kindSpecific[d.Name.Name] {
					t.Errorf("%s: %s.%s is kind-specific: it belongs in the kind's package", at(d), recv, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if kindSpecific[s.Name.Name] {
							t.Errorf("%s: type %s is kind-specific: it belongs in the kind's package", at(s), s.Name.Name)
						}
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								if len(fl.Names) == 0 && isGenGeneration(fl.Type) {
									t.Errorf("%s: type %s embeds gen.Generation: a kind's generation belongs in the kind's package", at(s), s.Name.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if kindSpecific[n.Name] {
								t.Errorf("%s: %s is kind-specific: it belongs in the kind's package", at(s), n.Name)
							}
						}
					}
				}
			}
		}
		for recv, ms := range methods {
			if recv == "unknownKind" {
				continue
			}
			if ms["Lookup"] || ms["TakeRefused"] || ms["Build"] && ms["Push"] {
				t.Errorf("%s: type %s has the methods of a kind's part or cache (gen.Part, gen.KindCache): they belong in the kind's package", filepath.ToSlash(rel), recv)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d files of package xds: too few", checked)
	}
}

func receiverName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if i, ok := e.(*ast.IndexExpr); ok {
		e = i.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func isGenGeneration(e ast.Expr) bool {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := s.X.(*ast.Ident)
	return ok && x.Name == "gen" && s.Sel.Name == "Generation"
}

// TestKindSeamIsALeaf: xds/gen, what the kinds and the server share,
// depends on neither (not even through another package), and no kind
// package imports xds, so a kind is one package beside the others and one
// row in xds/kinds.go. The kind packages are the folders of kindPlaces and
// any other package directly under xds that provides a gen.Kind.
func TestKindSeamIsALeaf(t *testing.T) {
	root := testenv.RepoRoot(t)
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Deps", "./xds/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	kinds := map[string]bool{}
	for _, p := range kindPlaces {
		if strings.HasSuffix(p, "/") {
			kinds[module+strings.TrimSuffix(p, "/")] = true
		}
	}
	type pkg struct {
		ImportPath string
		Imports    []string
		Deps       []string
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
		if kinds[p.ImportPath] {
			continue
		}
		// A package under xds that imports xds/gen and is not the server
		// (nor the seam's own test fixtures) is a kind.
		if dir, ok := strings.CutPrefix(p.ImportPath, module+"xds/"); ok && !strings.Contains(dir, "/") && dir != "gen" {
			for _, imp := range p.Imports {
				if imp == module+"xds/gen" {
					kinds[p.ImportPath] = true
				}
			}
		}
	}
	seam := module + "xds/gen"
	found := false
	for _, p := range pkgs {
		switch {
		case p.ImportPath == seam:
			found = true
			for _, d := range p.Deps {
				if d == module+"xds" || kinds[d] {
					t.Errorf("xds/gen depends on %s: the seam between the kinds and the server depends on neither", strings.TrimPrefix(d, module))
				}
			}
		case kinds[p.ImportPath]:
			for _, d := range p.Deps {
				if d == module+"xds" {
					t.Errorf("%s depends on xds: a kind package sits beside the server, under xds/gen", strings.TrimPrefix(p.ImportPath, module))
				}
			}
		}
	}
	if !found || len(kinds) < 2 {
		t.Fatalf("go list: xds/gen found %v, kind packages %v", found, kinds)
	}
}
