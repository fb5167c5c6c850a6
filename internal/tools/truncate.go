package tools

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Default output limits for the model, as in pi: whichever is hit first.
const (
	DefaultMaxLines = 2000
	DefaultMaxBytes = 50 * 1024
)

// Truncation reports what TruncateHead or TruncateTail kept of a text.
type Truncation struct {
	// Content is the kept text: whole lines, except when PartialLine.
	Content string
	// Truncated reports whether anything was dropped.
	Truncated bool
	// TruncatedBy is "lines", "bytes" or "" when nothing was dropped.
	TruncatedBy string
	TotalLines  int
	TotalBytes  int
	OutputLines int
	OutputBytes int
	// PartialLine reports that a single line was longer than the byte limit,
	// so Content holds only part of it (its start for head truncation, its
	// end for tail truncation).
	PartialLine bool
}

// CountLines returns the number of lines in s; a final newline ends the last
// line rather than starting an empty one.
func CountLines(s string) int {
	if s == "" {
		return 0
	}
	n := strings.Count(s, "\n")
	if !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// TruncateHead keeps the beginning of s: at most maxLines lines and maxBytes
// bytes of whole lines. Non-positive limits mean the defaults.
func TruncateHead(s string, maxLines, maxBytes int) Truncation {
	maxLines, maxBytes = limits(maxLines, maxBytes)
	t := Truncation{TotalLines: CountLines(s), TotalBytes: len(s)}
	end, lines := 0, 0
	for end < len(s) {
		next := len(s)
		if i := strings.IndexByte(s[end:], '\n'); i >= 0 {
			next = end + i + 1
		}
		if lines == maxLines {
			t.TruncatedBy = "lines"
			break
		}
		if next > maxBytes {
			t.TruncatedBy = "bytes"
			if lines == 0 {
				// The first line alone is too long: keep its start.
				end = runeStartAtOrBefore(s, maxBytes)
				lines = 1
				t.PartialLine = true
			}
			break
		}
		end, lines = next, lines+1
	}
	t.Content = s[:end]
	t.Truncated = end < len(s)
	if !t.Truncated {
		t.TruncatedBy = ""
	}
	t.OutputLines, t.OutputBytes = lines, end
	return t
}

// TruncateTail keeps the end of s: at most maxLines lines and maxBytes bytes
// of whole lines. Non-positive limits mean the defaults.
func TruncateTail(s string, maxLines, maxBytes int) Truncation {
	maxLines, maxBytes = limits(maxLines, maxBytes)
	t := Truncation{TotalLines: CountLines(s), TotalBytes: len(s)}
	start, lines := len(s), 0
	for start > 0 {
		// The line ending at start (its newline, if any, included) begins
		// after the previous newline.
		prev := strings.LastIndexByte(s[:start-1], '\n') + 1
		if lines == maxLines {
			t.TruncatedBy = "lines"
			break
		}
		if len(s)-prev > maxBytes {
			t.TruncatedBy = "bytes"
			if lines == 0 {
				// The last line alone is too long: keep its end.
				start = runeStartAtOrAfter(s, len(s)-maxBytes)
				lines = 1
				t.PartialLine = true
			}
			break
		}
		start, lines = prev, lines+1
	}
	t.Content = s[start:]
	t.Truncated = start > 0
	if !t.Truncated {
		t.TruncatedBy = ""
	}
	t.OutputLines, t.OutputBytes = lines, len(s)-start
	return t
}

func limits(maxLines, maxBytes int) (int, int) {
	if maxLines <= 0 {
		maxLines = DefaultMaxLines
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return maxLines, maxBytes
}

// runeStartAtOrBefore returns the largest i <= n that does not split a UTF-8
// sequence of s.
func runeStartAtOrBefore(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// runeStartAtOrAfter returns the smallest i >= n that does not split a UTF-8
// sequence of s.
func runeStartAtOrAfter(s string, n int) int {
	if n <= 0 {
		return 0
	}
	for n < len(s) && !utf8.RuneStart(s[n]) {
		n++
	}
	return n
}

// FormatSize renders a byte count for notes to the model ("512B", "50.0KB").
func FormatSize(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%dB", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1fKB", float64(n)/1024)
	default:
		return fmt.Sprintf("%.1fMB", float64(n)/(1024*1024))
	}
}
