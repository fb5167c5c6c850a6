package tools

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString("line ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\n")
	}
	return b.String()
}

func TestCountLines(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", 0}, {"a", 1}, {"a\n", 1}, {"a\nb", 2}, {"a\nb\n", 2}, {"\n", 1}, {"\n\n", 2},
	} {
		if got := CountLines(c.in); got != c.want {
			t.Errorf("CountLines(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestTruncateHead(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 100) // 200 bytes, 2-byte runes
	cases := []struct {
		name                string
		in                  string
		maxLines, maxBytes  int
		want                string
		truncated, partial  bool
		by                  string
		outLines, totalLine int
	}{
		{"empty", "", 10, 100, "", false, false, "", 0, 0},
		{"fits", "a\nb\nc\n", 10, 100, "a\nb\nc\n", false, false, "", 3, 3},
		{"fits no final newline", "a\nb", 2, 100, "a\nb", false, false, "", 2, 2},
		{"lines", "a\nb\nc\nd\n", 2, 100, "a\nb\n", true, false, "lines", 2, 4},
		{"bytes whole lines", "aaa\nbbb\nccc\n", 10, 9, "aaa\nbbb\n", true, false, "bytes", 2, 3},
		{"bytes exact", "aaa\nbbb\n", 10, 8, "aaa\nbbb\n", false, false, "", 2, 2},
		{"first line too long", long + "\nnext\n", 10, 51, strings.Repeat("é", 25), true, true, "bytes", 1, 2},
	}
	for _, c := range cases {
		tr := TruncateHead(c.in, c.maxLines, c.maxBytes)
		if tr.Content != c.want || tr.Truncated != c.truncated || tr.PartialLine != c.partial || tr.TruncatedBy != c.by ||
			tr.OutputLines != c.outLines || tr.TotalLines != c.totalLine || tr.OutputBytes != len(tr.Content) || tr.TotalBytes != len(c.in) {
			t.Errorf("%s: got %+v", c.name, tr)
		}
		if !utf8.ValidString(tr.Content) {
			t.Errorf("%s: content is not valid UTF-8", c.name)
		}
	}
}

func TestTruncateTail(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 100)
	cases := []struct {
		name                string
		in                  string
		maxLines, maxBytes  int
		want                string
		truncated, partial  bool
		by                  string
		outLines, totalLine int
	}{
		{"empty", "", 10, 100, "", false, false, "", 0, 0},
		{"fits", "a\nb\nc\n", 10, 100, "a\nb\nc\n", false, false, "", 3, 3},
		{"lines", "a\nb\nc\nd\n", 2, 100, "c\nd\n", true, false, "lines", 2, 4},
		{"lines no final newline", "a\nb\nc\nd", 2, 100, "c\nd", true, false, "lines", 2, 4},
		{"bytes whole lines", "aaa\nbbb\nccc\n", 10, 9, "bbb\nccc\n", true, false, "bytes", 2, 3},
		{"last line too long", "first\n" + long, 10, 51, strings.Repeat("é", 25), true, true, "bytes", 1, 2},
	}
	for _, c := range cases {
		tr := TruncateTail(c.in, c.maxLines, c.maxBytes)
		if tr.Content != c.want || tr.Truncated != c.truncated || tr.PartialLine != c.partial || tr.TruncatedBy != c.by ||
			tr.OutputLines != c.outLines || tr.TotalLines != c.totalLine || tr.OutputBytes != len(tr.Content) {
			t.Errorf("%s: got %+v", c.name, tr)
		}
		if !utf8.ValidString(tr.Content) {
			t.Errorf("%s: content is not valid UTF-8", c.name)
		}
	}
}

func TestTruncateDefaults(t *testing.T) {
	t.Parallel()
	in := numbered(5000)
	head := TruncateHead(in, 0, 0)
	if head.OutputLines != DefaultMaxLines || !strings.HasPrefix(in, head.Content) || head.TruncatedBy != "lines" {
		t.Errorf("head: %d lines by %s", head.OutputLines, head.TruncatedBy)
	}
	tail := TruncateTail(in, 0, 0)
	if tail.OutputLines != DefaultMaxLines || !strings.HasSuffix(in, tail.Content) || tail.TruncatedBy != "lines" {
		t.Errorf("tail: %d lines by %s", tail.OutputLines, tail.TruncatedBy)
	}
	big := strings.Repeat(strings.Repeat("y", 999)+"\n", 100) // 100 KB
	if tr := TruncateHead(big, 0, 0); tr.OutputLines != 51 || tr.TruncatedBy != "bytes" || tr.OutputBytes > DefaultMaxBytes {
		t.Errorf("head bytes: %d lines, %d bytes, by %s", tr.OutputLines, tr.OutputBytes, tr.TruncatedBy)
	}
	if tr := TruncateTail(big, 0, 0); tr.OutputLines != 51 || tr.TruncatedBy != "bytes" || tr.OutputBytes > DefaultMaxBytes {
		t.Errorf("tail bytes: %d lines, %d bytes, by %s", tr.OutputLines, tr.OutputBytes, tr.TruncatedBy)
	}
}

func TestFormatSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0B", 1023: "1023B", 1024: "1.0KB", 51200: "50.0KB", 3 << 20: "3.0MB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
