// Package apicheck reads the public packages' source and reports every
// exported declaration whose signature names a type from an internal/
// package. An embedder cannot name such a type, so a public API that
// mentions one is sealed in name only; `make test` keeps the count at zero.
package apicheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Leak is one exported declaration that names an internal type.
type Leak struct {
	Package string // directory of the public package, relative to the root
	Decl    string // the exported name (Type.Method, Type.Field, Func, …)
	Type    string // the internal type as written, e.g. transcript.Entry
	Pos     string // file:line
}

func (l Leak) String() string {
	return fmt.Sprintf("%s: %s mentions internal %s (%s)", l.Pos, l.Decl, l.Type, l.Package)
}

// Package is what the check learned about one public package.
type Package struct {
	Dir      string
	Exported []string // exported names, Type.Method and Type.Field included
	Types    []string // exported type names
	Leaks    []Leak
	// External are the import paths of third-party packages (neither the
	// standard library nor this module) whose names exported declarations
	// mention, each with the declarations that do.
	External map[string][]string
}

// Scan parses the non-test Go files of dir (relative to root) and returns its
// exported names and leaks. Only syntax is read: a selector pkg.Name whose
// import path contains "/internal/" is a leak wherever it appears in an
// exported declaration's signature, alias, struct field or interface method.
func Scan(root, dir string) (Package, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		return Package{}, err
	}
	p := Package{Dir: dir, External: map[string][]string{}}
	exported := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return Package{}, err
		}
		s := fileScan{fset: fset, imports: internalImports(f), paths: importPaths(f), pkg: &p, exported: exported, root: root}
		s.decls(f)
	}
	for n := range exported {
		p.Exported = append(p.Exported, n)
	}
	sort.Strings(p.Exported)
	sort.Strings(p.Types)
	for path, decls := range p.External {
		sort.Strings(decls)
		p.External[path] = slices.Compact(decls)
	}
	return p, nil
}

// internalImports maps each file-local package name to whether its import
// path is internal.
func internalImports(f *ast.File) map[string]bool {
	m := map[string]bool{}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		m[name] = strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal")
	}
	return m
}

// importPaths maps each file-local package name to its import path.
func importPaths(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		m[name] = path
	}
	return m
}

// thirdParty reports whether path is neither the standard library (its
// first element has no dot) nor this module.
func thirdParty(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return strings.Contains(first, ".") && !strings.HasPrefix(path, Module+"/") && path != Module
}

// Module is this repository's module path.
const Module = "github.com/fastagent/fastagent"

type fileScan struct {
	fset     *token.FileSet
	root     string
	imports  map[string]bool
	paths    map[string]string
	pkg      *Package
	exported map[string]bool
}

func (s fileScan) decls(f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			s.funcDecl(d)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				s.spec(spec)
			}
		}
	}
}

func (s fileScan) funcDecl(d *ast.FuncDecl) {
	if !d.Name.IsExported() {
		return
	}
	name := d.Name.Name
	if d.Recv != nil && len(d.Recv.List) > 0 {
		recv := receiverName(d.Recv.List[0].Type)
		if !ast.IsExported(recv) {
			return
		}
		name = recv + "." + name
	}
	s.exported[name] = true
	s.mentions(name, d.Type)
}

func (s fileScan) spec(spec ast.Spec) {
	switch sp := spec.(type) {
	case *ast.TypeSpec:
		if !sp.Name.IsExported() {
			return
		}
		s.exported[sp.Name.Name] = true
		s.pkg.Types = append(s.pkg.Types, sp.Name.Name)
		s.typeSpec(sp)
	case *ast.ValueSpec:
		for _, n := range sp.Names {
			if !n.IsExported() {
				continue
			}
			s.exported[n.Name] = true
			if sp.Type != nil {
				s.mentions(n.Name, sp.Type)
			}
		}
	}
}

// typeSpec checks an exported type: an alias or defined type's underlying
// expression, but inside structs and interfaces only exported members.
func (s fileScan) typeSpec(sp *ast.TypeSpec) {
	name := sp.Name.Name
	switch t := sp.Type.(type) {
	case *ast.StructType:
		for _, f := range t.Fields.List {
			for _, member := range memberNames(f) {
				if ast.IsExported(member) {
					s.exported[name+"."+member] = true
					s.mentions(name+"."+member, f.Type)
				}
			}
		}
	case *ast.InterfaceType:
		for _, f := range t.Methods.List {
			for _, member := range memberNames(f) {
				if ast.IsExported(member) {
					s.exported[name+"."+member] = true
					s.mentions(name+"."+member, f.Type)
				}
			}
		}
	default:
		s.mentions(name, sp.Type)
	}
}

// memberNames names a field or method; an embedded one is named by its type.
func memberNames(f *ast.Field) []string {
	if len(f.Names) > 0 {
		out := make([]string, len(f.Names))
		for i, n := range f.Names {
			out[i] = n.Name
		}
		return out
	}
	return []string{receiverName(f.Type)}
}

func receiverName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.SelectorExpr:
			return t.Sel.Name
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// mentions records a leak for every internal selector inside e.
func (s fileScan) mentions(decl string, e ast.Expr) {
	ast.Inspect(e, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if ok && thirdParty(s.paths[id.Name]) {
			path := s.paths[id.Name]
			s.pkg.External[path] = append(s.pkg.External[path], decl)
		}
		if ok && s.imports[id.Name] {
			pos := s.fset.Position(sel.Pos())
			rel, _ := filepath.Rel(s.root, pos.Filename)
			s.pkg.Leaks = append(s.pkg.Leaks, Leak{
				Package: s.pkg.Dir,
				Decl:    decl,
				Type:    id.Name + "." + sel.Sel.Name,
				Pos:     fmt.Sprintf("%s:%d", rel, pos.Line),
			})
		}
		return false
	})
}
