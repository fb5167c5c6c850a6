package channels

import (
	"context"
	"strings"
	"unicode/utf8"
)

// Refs stores platform references beside the one Channel.Stream and
// Channel.Reply keep per turn: the later parts of an answer split over
// several messages (store.Store has these methods). The first write of a
// key wins.
type Refs interface {
	SaveReply(ctx context.Context, session, turn, ref string) error
	Reply(ctx context.Context, session, turn string) (string, error)
}

// SplitText cuts text into parts of at most max bytes whose concatenation
// is text, byte for byte. A cut never splits a UTF-8 sequence; it falls
// after a blank line where one lies in the second half of the part, else
// after a line break, else after a space or a CJK sentence mark, else at a
// rune boundary. A cut that would fall inside a fenced code block moves to
// the start of the fence's line when that keeps the part over a quarter of
// max. A text of at most max bytes is one part; max is at least 16.
func SplitText(text string, max int) []string {
	if max < 16 {
		max = 16
	}
	var parts []string
	for len(text) > max {
		cut := cutAt(text, max)
		parts = append(parts, text[:cut])
		text = text[cut:]
	}
	if text != "" || len(parts) == 0 {
		parts = append(parts, text)
	}
	return parts
}

// sentenceMarks are the places, besides line breaks, a part may end after.
var sentenceMarks = []string{" ", "。", "！", "？", "；", "，", "、", "．"}

// cutAt returns where the first part of text (longer than max) ends.
func cutAt(text string, max int) int {
	end := max
	for end > 0 && !utf8.RuneStart(text[end]) {
		end--
	}
	if end == 0 {
		// No rune starts within max bytes (invalid UTF-8): cut anyway.
		return max
	}
	window := text[:end]
	cut := end
	for _, sep := range [][]string{{"\n\n"}, {"\n"}, sentenceMarks} {
		best := -1
		for _, s := range sep {
			if i := strings.LastIndex(window, s); i >= 0 && i+len(s) > best {
				best = i + len(s)
			}
		}
		if best > end/2 {
			cut = best
			break
		}
	}
	// Inside a fenced code block: cut before the line that opened it.
	if open := openFence(text[:cut]); open > max/4 {
		cut = open
	}
	return cut
}

// openFence returns the start of the line of the code fence left open at
// the end of s, or -1 when every fence is closed.
func openFence(s string) int {
	open := -1
	for i := 0; i < len(s); {
		line := s[i:]
		if j := strings.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			if open < 0 {
				open = i
			} else {
				open = -1
			}
		}
		i += len(line) + 1
	}
	return open
}
