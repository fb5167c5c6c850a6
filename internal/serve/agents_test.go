package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --agent values name another folder under a task-queue name; anything
// else is refused with what to write instead.
func TestParseAgents(t *testing.T) {
	main, other := t.TempDir(), t.TempDir()
	got, err := ParseAgents([]string{"reviewer=" + other}, main)
	if abs, _ := filepath.Abs(other); err != nil || got["reviewer"] != abs || len(got) != 1 {
		t.Fatalf("ParseAgents = %v, %v", got, err)
	}
	file := filepath.Join(other, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{[]string{"reviewer"}, "want name=folder"},
		{[]string{"Reviewer=" + other}, "want name=folder"},
		{[]string{"reviewer="}, "want name=folder"},
		{[]string{"reviewer=" + filepath.Join(other, "nope")}, "is not a folder"},
		{[]string{"reviewer=" + file}, "is not a folder"},
		{[]string{"reviewer=" + main}, "the main agent's folder"},
		{[]string{"reviewer=" + other, "reviewer=" + other}, "named twice"},
	} {
		if _, err := ParseAgents(tc.values, main); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseAgents(%q) = %v, want an error with %q", tc.values, err, tc.want)
		}
	}
}
