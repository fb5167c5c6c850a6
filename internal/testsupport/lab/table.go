package lab

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Table prints rows in aligned columns.
type Table struct {
	Header []string
	Rows   [][]string
}

// Add appends a row; missing cells are blank.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// Fprint writes the table: the header, a rule, the rows, each column as wide
// as its widest cell.
func (t *Table) Fprint(w io.Writer) {
	width := make([]int, len(t.Header))
	for i, h := range t.Header {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], utf8.RuneCountInString(c))
			}
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i := range width {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			b.WriteString(c)
			if i < len(width)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.Header)
	rule := make([]string, len(width))
	for i, n := range width {
		rule[i] = strings.Repeat("─", n)
	}
	line(rule)
	for _, r := range t.Rows {
		line(r)
	}
}

// Progress prints progress lines on a writer (stderr), each prefixed with
// the step ("[3/7] throughput: 640/1000 turns…"), at most one every interval
// for the same step unless forced. It is safe for concurrent use.
type Progress struct {
	W     io.Writer
	mu    sync.Mutex
	Total int
	step  int
	name  string
	last  time.Time
	start time.Time
}

// Step starts step i of the total.
func (p *Progress) Step(i int, name string) {
	p.mu.Lock()
	p.step, p.name, p.start, p.last = i, name, time.Now(), time.Time{}
	p.mu.Unlock()
	p.print(true, "starting")
}

// Printf prints a progress line for the current step, throttled to one a
// second.
func (p *Progress) Printf(format string, args ...any) { p.print(false, format, args...) }

// Logf prints a progress line for the current step, unthrottled.
func (p *Progress) Logf(format string, args ...any) { p.print(true, format, args...) }

func (p *Progress) print(force bool, format string, args ...any) {
	if p == nil || p.W == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if !force && now.Sub(p.last) < time.Second {
		return
	}
	p.last = now
	prefix := ""
	if p.Total > 0 {
		prefix = fmt.Sprintf("[%d/%d] ", p.step, p.Total)
	}
	fmt.Fprintf(p.W, "%s%s: %s (%s)\n", prefix, p.name, fmt.Sprintf(format, args...), now.Sub(p.start).Round(100*time.Millisecond))
}

// OneLine folds s onto one line (runs of white space become one space) and
// cuts it after n bytes with "…".
func OneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
