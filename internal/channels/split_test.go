package channels

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitText(t *testing.T) {
	t.Parallel()
	para := strings.Repeat("中文段落。", 30) // 450 bytes
	cases := []struct {
		name string
		text string
		max  int
		// check inspects the parts beyond the shared invariants.
		check func(t *testing.T, parts []string)
	}{
		{"short", "hello", 100, func(t *testing.T, parts []string) {
			if len(parts) != 1 {
				t.Errorf("parts = %q", parts)
			}
		}},
		{"empty", "", 100, nil},
		{"paragraphs", strings.Repeat(para+"\n\n", 20), 1000, func(t *testing.T, parts []string) {
			for _, p := range parts[:len(parts)-1] {
				if !strings.HasSuffix(p, "\n\n") {
					t.Errorf("part does not end at a blank line: …%q", p[len(p)-12:])
				}
			}
		}},
		{"one long CJK line", strings.Repeat("字", 5000), 1000, nil},
		{"CJK sentences", strings.Repeat("一句话。", 2000), 1000, func(t *testing.T, parts []string) {
			for _, p := range parts[:len(parts)-1] {
				if !strings.HasSuffix(p, "。") {
					t.Errorf("part does not end after a sentence mark: …%q", p[len(p)-6:])
				}
			}
		}},
		{"code fence", strings.Repeat("intro line\n", 40) + "```go\n" + strings.Repeat("x := 1\n", 200) + "```\n", 1000, func(t *testing.T, parts []string) {
			if !strings.HasPrefix(parts[1], "```go\n") {
				t.Errorf("second part starts %q, want the fence", parts[1][:10])
			}
		}},
		{"no break at all", strings.Repeat("a", 2500), 1000, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			parts := SplitText(c.text, c.max)
			if got := strings.Join(parts, ""); got != c.text {
				t.Fatalf("joined parts differ from the text (%d vs %d bytes)", len(got), len(c.text))
			}
			for i, p := range parts {
				if len(p) > c.max {
					t.Errorf("part %d is %d bytes, over %d", i, len(p), c.max)
				}
				if !utf8.ValidString(p) {
					t.Errorf("part %d splits a rune", i)
				}
				if p == "" && len(parts) > 1 {
					t.Errorf("part %d is empty", i)
				}
			}
			if c.check != nil {
				c.check(t, parts)
			}
		})
	}
}
