package telegram

import (
	"html"
	"strings"
	"unicode/utf8"
)

// MaxText is the most characters (UTF-16 code units, as the Bot API
// counts) of one message.
const MaxText = 4096

// HTML renders Markdown as the Telegram HTML subset: **bold**/__bold__ →
// <b>, *italic*/_italic_ → <i>, ~~strike~~ → <s>, `code` → <code>, fenced
// code → <pre><code>, [text](http…) → <a href>, "> " lines →
// <blockquote>, headings → <b>, list bullets → "•". Every other <, > and &
// is escaped; what is not well-formed Markdown stays literal text.
func HTML(md string) string {
	lines := strings.Split(strings.ReplaceAll(md, "\r\n", "\n"), "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trim := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trim, "```"):
			lang := strings.TrimSpace(strings.TrimPrefix(trim, "```"))
			var code []string
			j := i + 1
			for ; j < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[j]), "```"); j++ {
				code = append(code, lines[j])
			}
			open := "<pre><code>"
			if lang != "" && isLang(lang) {
				open = `<pre><code class="language-` + lang + `">`
			}
			out = append(out, open+html.EscapeString(strings.Join(code, "\n"))+"</code></pre>")
			i = j // the closing fence (or the end)
		case strings.HasPrefix(trim, ">"):
			var quote []string
			j := i
			for ; j < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[j]), ">"); j++ {
				q := strings.TrimPrefix(strings.TrimSpace(lines[j]), ">")
				quote = append(quote, inline(strings.TrimPrefix(q, " ")))
			}
			out = append(out, "<blockquote>"+strings.Join(quote, "\n")+"</blockquote>")
			i = j - 1
		case heading(trim) > 0:
			out = append(out, "<b>"+inline(strings.TrimSpace(trim[heading(trim):]))+"</b>")
		case strings.HasPrefix(trim, "- ") || strings.HasPrefix(trim, "* ") || strings.HasPrefix(trim, "+ "):
			indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			out = append(out, indent+"• "+inline(trim[2:]))
		default:
			out = append(out, inline(line))
		}
	}
	return strings.Join(out, "\n")
}

// heading returns the length of a Markdown heading's "#… " prefix (0: not
// a heading).
func heading(s string) int {
	n := 0
	for n < len(s) && n < 6 && s[n] == '#' {
		n++
	}
	if n == 0 || n >= len(s) || s[n] != ' ' {
		return 0
	}
	return n + 1
}

func isLang(s string) bool {
	for _, c := range s {
		switch {
		case c == '-', c == '+', c == '#', c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return len(s) <= 32
}

func isWordByte(c byte) bool {
	return c >= 0x80 || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// inline renders one line's inline Markdown.
func inline(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && strings.IndexByte("\\`*_~[]()#>-+.!|", s[i+1]) >= 0:
			b.WriteString(html.EscapeString(s[i+1 : i+2]))
			i += 2
			continue
		case c == '`':
			if j := strings.IndexByte(s[i+1:], '`'); j > 0 {
				b.WriteString("<code>" + html.EscapeString(s[i+1:i+1+j]) + "</code>")
				i += j + 2
				continue
			}
		case strings.HasPrefix(s[i:], "**") || strings.HasPrefix(s[i:], "__") || strings.HasPrefix(s[i:], "~~"):
			d := s[i : i+2]
			if j := strings.Index(s[i+2:], d); j > 0 && s[i+2] != ' ' && s[i+1+j] != ' ' {
				tag := "b"
				if d == "~~" {
					tag = "s"
				}
				b.WriteString("<" + tag + ">" + inline(s[i+2:i+2+j]) + "</" + tag + ">")
				i += j + 4
				continue
			}
		case c == '*' || c == '_':
			if j := closer(s, i); j > 0 {
				b.WriteString("<i>" + inline(s[i+1:j]) + "</i>")
				i = j + 1
				continue
			}
		case c == '[':
			if text, href, n := link(s[i:]); n > 0 {
				b.WriteString(`<a href="` + html.EscapeString(href) + `">` + inline(text) + "</a>")
				i += n
				continue
			}
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		b.WriteString(html.EscapeString(s[i : i+size]))
		i += size
	}
	return b.String()
}

// closer finds the end of an emphasis opened by s[i] ('*' or '_'); -1 when
// there is none. An opener is followed by a non-space; '_' must not sit
// inside a word on either side.
func closer(s string, i int) int {
	c := s[i]
	if i+1 >= len(s) || s[i+1] == ' ' || s[i+1] == c || (c == '_' && i > 0 && isWordByte(s[i-1])) {
		return -1
	}
	for j := i + 2; j < len(s); j++ {
		if s[j] == '`' {
			if k := strings.IndexByte(s[j+1:], '`'); k > 0 {
				j += k + 1 // a code span hides its delimiters
				continue
			}
		}
		if s[j] != c || s[j-1] == ' ' || s[j-1] == '\\' {
			continue
		}
		if j+1 < len(s) && s[j+1] == c {
			j++ // part of a double delimiter
			continue
		}
		if c == '_' && j+1 < len(s) && isWordByte(s[j+1]) {
			continue
		}
		return j
	}
	return -1
}

// link parses "[text](href)" at the start of s; n is its length (0: not a
// link). Only http(s), tg and mailto links are kept.
func link(s string) (text, href string, n int) {
	close := strings.Index(s, "](")
	if close <= 1 || strings.ContainsAny(s[1:close], "[]") {
		return "", "", 0
	}
	end := strings.IndexByte(s[close+2:], ')')
	if end <= 0 {
		return "", "", 0
	}
	href = s[close+2 : close+2+end]
	if strings.ContainsAny(href, " \"<>") || len(href) > 1024 {
		return "", "", 0
	}
	lower := strings.ToLower(href)
	if !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") &&
		!strings.HasPrefix(lower, "tg://") && !strings.HasPrefix(lower, "mailto:") {
		return "", "", 0
	}
	return s[1:close], href, close + 2 + end + 1
}

// token is one piece of rendered HTML: a tag, or one visible character
// (a rune or an entity).
type token struct {
	raw  string
	tag  string // tag name; "" for text
	open bool
	size int // UTF-16 units of raw
}

func tokenize(h string) []token {
	var out []token
	for i := 0; i < len(h); {
		switch h[i] {
		case '<':
			j := strings.IndexByte(h[i:], '>')
			if j < 0 {
				j = len(h) - i - 1
			}
			raw := h[i : i+j+1]
			name := strings.TrimPrefix(raw[1:len(raw)-1], "/")
			if k := strings.IndexAny(name, " >"); k >= 0 {
				name = name[:k]
			}
			out = append(out, token{raw: raw, tag: name, open: !strings.HasPrefix(raw, "</"), size: units(raw)})
			i += j + 1
			continue
		case '&':
			if j := strings.IndexByte(h[i:], ';'); j > 0 && j < 10 {
				raw := h[i : i+j+1]
				out = append(out, token{raw: raw, size: len(raw)})
				i += j + 1
				continue
			}
		}
		_, size := utf8.DecodeRuneInString(h[i:])
		raw := h[i : i+size]
		out = append(out, token{raw: raw, size: units(raw)})
		i += size
	}
	return out
}

// units is the length of s in UTF-16 code units.
func units(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r >= 0x10000 {
			n++
		}
	}
	return n
}

// Split cuts rendered HTML into parts of at most limit characters
// (UTF-16 units, tags included) without breaking a tag: tags open at a cut
// are closed at the end of the part and reopened at the start of the
// next. It cuts at the last newline (else space) of a part when there is
// one. Each part is well-formed; their visible texts concatenate to the
// whole's.
func Split(h string, limit int) []string {
	if units(h) <= limit {
		return []string{h}
	}
	toks := tokenize(h)
	var parts []string
	var base []token // tags open at the start of the current part
	for start := 0; start < len(toks); {
		stack := append([]token(nil), base...)
		size := 0
		for _, t := range base {
			size += t.size
		}
		end, lastNL, lastSP := start, -1, -1
		for end < len(toks) {
			t := toks[end]
			next := push(stack, t)
			if size+t.size+closeSize(next) > limit && end > start {
				break
			}
			stack, size = next, size+t.size
			end++
			switch {
			case t.tag == "" && t.raw == "\n":
				lastNL = end
			case t.tag == "" && t.raw == " ":
				lastSP = end
			}
		}
		cut := end
		if end < len(toks) {
			if lastNL > start {
				cut = lastNL
			} else if lastSP > start {
				cut = lastSP
			}
		}
		st := append([]token(nil), base...)
		var b strings.Builder
		for _, t := range base {
			b.WriteString(t.raw)
		}
		for _, t := range toks[start:cut] {
			b.WriteString(t.raw)
			st = push(st, t)
		}
		for k := len(st) - 1; k >= 0; k-- {
			b.WriteString("</" + st[k].tag + ">")
		}
		parts = append(parts, b.String())
		start, base = cut, st
	}
	return parts
}

// push applies tag token t to the open-tag stack (a copy when it changes).
func push(stack []token, t token) []token {
	switch {
	case t.tag == "":
		return stack
	case t.open:
		return append(append([]token(nil), stack...), t)
	}
	for k := len(stack) - 1; k >= 0; k-- {
		if stack[k].tag == t.tag {
			return append([]token(nil), stack[:k]...)
		}
	}
	return stack
}

func closeSize(stack []token) int {
	n := 0
	for _, t := range stack {
		n += len(t.tag) + 3
	}
	return n
}

// Plain is the visible text of rendered HTML: tags dropped, entities
// decoded.
func Plain(h string) string {
	var b strings.Builder
	for _, t := range tokenize(h) {
		if t.tag == "" {
			b.WriteString(t.raw)
		}
	}
	return html.UnescapeString(b.String())
}
