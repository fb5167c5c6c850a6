package telegram

import (
	"math/rand"
	"strings"
	"testing"
)

func TestHTML(t *testing.T) {
	t.Parallel()
	cases := []struct{ md, want string }{
		{"plain <b> & text", "plain &lt;b&gt; &amp; text"},
		{"**bold** and __bold__", "<b>bold</b> and <b>bold</b>"},
		{"*it* and _it_", "<i>it</i> and <i>it</i>"},
		{"snake_case_name stays", "snake_case_name stays"},
		{"2 * 3 * 4", "2 * 3 * 4"},
		{"~~gone~~", "<s>gone</s>"},
		{"use `a<b>` here", "use <code>a&lt;b&gt;</code> here"},
		{"**bold `code` inside**", "<b>bold <code>code</code> inside</b>"},
		{"[site](https://example.com/?a=1&b=2)", `<a href="https://example.com/?a=1&amp;b=2">site</a>`},
		{"[bad](javascript:alert(1))", "[bad](javascript:alert(1))"},
		{"# Title", "<b>Title</b>"},
		{"- one\n- two", "• one\n• two"},
		{"> quoted\n> more", "<blockquote>quoted\nmore</blockquote>"},
		{"```go\nif a < b {}\n```", `<pre><code class="language-go">if a &lt; b {}</code></pre>`},
		{"```\nunclosed", "<pre><code>unclosed</code></pre>"},
		{`\*not italic\*`, "*not italic*"},
		{"**unclosed bold", "**unclosed bold"},
	}
	for _, c := range cases {
		if got := HTML(c.md); got != c.want {
			t.Errorf("HTML(%q) = %q, want %q", c.md, got, c.want)
		}
	}
}

func TestSplitKeepsTags(t *testing.T) {
	t.Parallel()
	h := "<b>" + strings.Repeat("word ", 30) + "</b>"
	parts := Split(h, 40)
	if len(parts) < 4 {
		t.Fatalf("parts %q", parts)
	}
	for _, p := range parts {
		if !strings.HasPrefix(p, "<b>") || !strings.HasSuffix(p, "</b>") || units(p) > 40 {
			t.Errorf("part %q: want <b>…</b> within 40", p)
		}
	}
	if got := Split("short", 4096); len(got) != 1 || got[0] != "short" {
		t.Errorf("Split(short) = %q", got)
	}
}

// randomMarkdown builds Markdown from pieces that exercise every rule,
// with multi-byte and astral characters.
func randomMarkdown(r *rand.Rand) string {
	pieces := []string{"word", "слово", "字", "😀", "a<b", "x&y", "**bold**", "*it*", "_it_", "~~s~~", "`c<d`",
		"[l](https://e.com/x?a=1&b=2)", "\n", "\n\n", "# Head", "- item", "> quote", "```go\nx := 1 < 2\n```", "**", "_", "`",
		"[", "](", "<", ">", "&", " ", " ", " ", "snake_case", "**bold with *it* inside**"}
	n := 50 + r.Intn(3000)
	var b strings.Builder
	for i := 0; i < n; i++ {
		p := pieces[r.Intn(len(pieces))]
		if p == "- item" || p == "> quote" || p == "# Head" || strings.HasPrefix(p, "```") {
			b.WriteString("\n")
		}
		b.WriteString(p)
		if r.Intn(3) == 0 {
			b.WriteString(" ")
		}
	}
	return b.String()
}

// wellFormed reports whether h's tags nest and all close.
func wellFormed(h string) bool {
	var stack []string
	for _, t := range tokenize(h) {
		switch {
		case t.tag == "":
		case t.open:
			stack = append(stack, t.tag)
		case len(stack) == 0 || stack[len(stack)-1] != t.tag:
			return false
		default:
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0
}

// TestSplitProperty: over random Markdown, every part is within the
// limit, every part's tags are balanced, and the parts' visible texts
// concatenate to the rendered text's.
func TestSplitProperty(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(14))
	for i := 0; i < 100; i++ {
		md := randomMarkdown(r)
		h := HTML(md)
		if !wellFormed(h) {
			t.Fatalf("HTML(%q) is not well-formed: %q", md, h)
		}
		for _, limit := range []int{MaxText, 200 + r.Intn(400)} {
			parts := Split(h, limit)
			var all strings.Builder
			for _, p := range parts {
				if units(p) > limit {
					t.Fatalf("limit %d: part of %d units", limit, units(p))
				}
				if !wellFormed(p) {
					t.Fatalf("limit %d: part not balanced: %q", limit, p)
				}
				all.WriteString(Plain(p))
			}
			if all.String() != Plain(h) {
				t.Fatalf("limit %d: parts' text differs from the rendered text\nparts %q\nwhole %q", limit, all.String(), Plain(h))
			}
			if limit == MaxText && units(h) > MaxText && len(parts) < 2 {
				t.Fatalf("a text of %d units in one part", units(h))
			}
		}
	}
}

// BenchmarkHTMLSplit renders and splits a ~12,000-character Markdown
// answer (three messages), the work of one final reply.
func BenchmarkHTMLSplit(b *testing.B) {
	var md strings.Builder
	for md.Len() < 12000 {
		md.WriteString("## Step\n- **Paris** is the capital of *France* & `fr` — see [docs](https://example.com/a?b=1)\n> quoted line\n")
	}
	s := md.String()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if parts := Split(HTML(s), MaxText); len(parts) < 3 {
			b.Fatalf("%d parts", len(parts))
		}
	}
}
