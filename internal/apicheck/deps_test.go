package apicheck

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// goList runs `go list args…` in dir and returns its output lines.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.Fields(string(out))
}

// The production binary, the public packages and a program importing only
// them (the examples module) link no Temporal server: only the dev server
// program (cmd/fastagent-devserver, a module of its own) does.
func TestNoTemporalServerLinked(t *testing.T) {
	for _, tc := range []struct{ dir, pkgs string }{
		{"../..", "./cmd/fastagent"},
		{"../..", "./cmd/fastagent-lab"},
		{"../..", "."},
		{"../../examples", "./..."},
	} {
		for _, dep := range goList(t, tc.dir, "-deps", "-test", tc.pkgs) {
			if strings.HasPrefix(dep, "go.temporal.io/server") || strings.HasPrefix(dep, "github.com/temporalio/ui-server") {
				t.Errorf("%s (in %s) links %s", tc.pkgs, tc.dir, dep)
				break
			}
		}
	}
}

// Workers and library users get the current SDK and API (at least these
// versions), in the main module and in a program importing it.
func TestCurrentTemporalSDK(t *testing.T) {
	want := map[string]string{"go.temporal.io/sdk": "v1.51.0", "go.temporal.io/api": "v1.64.3"}
	for _, dir := range []string{"../..", "../../examples"} {
		got := goList(t, dir, "-m", "go.temporal.io/sdk", "go.temporal.io/api")
		for i := 0; i+1 < len(got); i += 2 {
			if w := want[got[i]]; older(got[i+1], w) {
				t.Errorf("%s: %s %s, want %s or newer", dir, got[i], got[i+1], w)
			}
		}
	}
}

// older reports whether semantic version a (vX.Y.Z…) is older than b.
func older(a, b string) bool {
	pa, pb := parts(a), parts(b)
	for i := range pa {
		if pa[i] != pb[i] {
			return pa[i] < pb[i]
		}
	}
	return false
}

func parts(v string) [3]int {
	var p [3]int
	core, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	for i, s := range strings.SplitN(core, ".", 3) {
		p[i], _ = strconv.Atoi(s)
	}
	return p
}
