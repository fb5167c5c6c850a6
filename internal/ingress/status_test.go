package ingress_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/ingress"
)

// Every code a client can get has one HTTP status, from one table.
func TestStatusTable(t *testing.T) {
	t.Parallel()
	want := map[string]int{
		ingress.CodeUnauthorized:        401,
		ingress.CodeForbidden:           403,
		ingress.CodeForbiddenOrigin:     403,
		ingress.CodeMisdirected:         421,
		ingress.CodeUnsupportedMedia:    415,
		ingress.CodeLimitExceeded:       429,
		ingress.CodeTooLarge:            413,
		ingress.CodeRateLimited:         429,
		ingress.CodeOverloaded:          429,
		ingress.CodeDraining:            503,
		agent.CodeInvalidCommand:        400,
		agent.CodeNoSuchSession:         404,
		agent.CodeSessionBusy:           429,
		agent.CodeUnsupportedCapability: 501,
		"something_else":                502,
	}
	for code, st := range want {
		if got := ingress.StatusOfCode(code); got != st {
			t.Errorf("%s: status %d, want %d", code, got, st)
		}
	}
}

// Handlers say the code, never the status: an error body is written only
// through the table (abort, fail), so a code cannot mean two statuses.
func TestHandlersNameNoStatusForErrors(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	bad := regexp.MustCompile(`(c\.JSON|AbortWithStatusJSON)\(http\.Status[A-Za-z]+, gin\.H\{"error"|abort\(c, http\.`)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for i, line := range strings.Split(string(src), "\n") {
			if bad.MatchString(line) {
				t.Errorf("%s:%d writes an error with its own status: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d files: the glob is wrong", checked)
	}
}
