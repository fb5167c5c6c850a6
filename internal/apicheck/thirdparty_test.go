package apicheck

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// thirdPartyDoc is the section of the fastagent package documentation that
// names the third-party packages public signatures use, and why.
const thirdPartyDoc = "Third-party types in the public API"

// A public signature that names a third-party package's type ties users to
// that package's versions: each such package is named, with the reason, in
// the fastagent package documentation's section on third-party types.
func TestThirdPartyTypesAreDocumented(t *testing.T) {
	doc := packageDoc(t, root)
	_, section, ok := strings.Cut(doc, thirdPartyDoc)
	if !ok {
		t.Fatalf("the fastagent package documentation has no section %q", thirdPartyDoc)
	}
	for _, dir := range publicPackages(t) {
		p, err := Scan(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		for path, decls := range p.External {
			if !strings.Contains(section, moduleOf(path)) {
				t.Errorf("%s: %s name types of %s, which the section %q of the fastagent package documentation does not explain",
					dir, strings.Join(decls, ", "), path, thirdPartyDoc)
			}
		}
	}
}

// moduleOf shortens an import path to the module-like prefix the
// documentation names: the host and two elements (go.temporal.io/sdk,
// github.com/tmc/langchaingo, go.opentelemetry.io/otel).
func moduleOf(path string) string {
	parts := strings.Split(path, "/")
	n := 2
	if parts[0] == "github.com" {
		n = 3
	}
	if len(parts) > n {
		parts = parts[:n]
	}
	return strings.Join(parts, "/")
}

// packageDoc is the package comment of the Go package in dir.
func packageDoc(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			return f.Doc.Text()
		}
	}
	t.Fatalf("%s has no package documentation", dir)
	return ""
}
