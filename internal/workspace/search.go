package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/fastagent/fastagent/agent"
)

// SearchToolsName is the built-in tool that activates deferred tools. It is
// added when any tool is deferred, unless a tool of that name exists.
const SearchToolsName = "search_tools"

// searchLimit bounds the tools one search activates.
const searchLimit = 5

// SearchDetails is the ToolResult.Details of search_tools: the deferred tools
// the call activated, for the runtime to persist in the session.
type SearchDetails struct {
	Activated []string `json:"activated"`
}

// ActivatedTools returns the tool names a search_tools result activated
// (nil when details carry none).
func ActivatedTools(details json.RawMessage) []string {
	var d SearchDetails
	if len(details) == 0 || json.Unmarshal(details, &d) != nil {
		return nil
	}
	return d.Activated
}

var searchSchema = json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"Keywords describing the capability you need, e.g. \"calendar events\""}},"required":["query"],"additionalProperties":false}`)

// searchTool matches a query against the deferred tools of one definition.
type searchTool struct {
	deferred []agent.ToolSpec
}

func newSearchTool(d *Definition) *searchTool {
	t := &searchTool{}
	for _, e := range d.Tools {
		if s := e.Tool.Spec(); s.Deferred {
			t.deferred = append(t.deferred, s)
		}
	}
	return t
}

func (t *searchTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: SearchToolsName,
		Description: "Find more tools by keyword. Tools that match the query are activated and can be called from your next step on. " +
			"Use it when none of your tools fits the task.",
		Parameters: searchSchema,
		Idempotent: true,
	}
}

func (t *searchTool) Run(_ context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	var a struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(call.Args, &a); err != nil || strings.TrimSpace(a.Query) == "" {
		return agent.ToolResult{Content: `search_tools needs a query: {"query": "keywords"}`, IsError: true}, nil //nolint:nilerr // the model's mistake: an error result, not a Go error
	}
	matches := t.search(a.Query)
	names := make([]string, 0, len(matches))
	var b strings.Builder
	if len(matches) == 0 {
		fmt.Fprintf(&b, "No tool matches %q.", a.Query)
		if len(t.deferred) > 0 {
			var all []string
			for _, s := range t.deferred {
				all = append(all, s.Name)
			}
			fmt.Fprintf(&b, " Tools you can activate: %s.", strings.Join(all, ", "))
		}
	} else {
		fmt.Fprintf(&b, "Activated %d tool(s); you can call them now:\n", len(matches))
		for _, s := range matches {
			names = append(names, s.Name)
			fmt.Fprintf(&b, "\n- %s: %s", s.Name, firstLine(s.Description))
		}
	}
	details, _ := json.Marshal(SearchDetails{Activated: names})
	return agent.ToolResult{Content: b.String(), Details: details}, nil
}

// search ranks the deferred tools by the query words found in their names
// (weight 3, exact name 10) and descriptions (weight 1).
func (t *searchTool) search(query string) []agent.ToolSpec {
	words := searchWords(query)
	type hit struct {
		spec  agent.ToolSpec
		score int
	}
	var hits []hit
	for _, s := range t.deferred {
		name := strings.ToLower(s.Name)
		nameWords := searchWords(s.Name)
		descWords := searchWords(s.Description)
		score := 0
		if strings.EqualFold(strings.TrimSpace(query), s.Name) {
			score += 10
		}
		for _, w := range words {
			switch {
			case containsWord(nameWords, w) || (len(w) >= 3 && strings.Contains(name, w)):
				score += 3
			case containsWord(descWords, w):
				score++
			}
		}
		if score > 0 {
			hits = append(hits, hit{s, score})
		}
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].score != hits[j].score {
			return hits[i].score > hits[j].score
		}
		return hits[i].spec.Name < hits[j].spec.Name
	})
	var out []agent.ToolSpec
	for i := 0; i < len(hits) && i < searchLimit; i++ {
		out = append(out, hits[i].spec)
	}
	return out
}

// stopWords never match on their own.
var stopWords = map[string]bool{"a": true, "an": true, "the": true, "to": true, "of": true, "for": true, "and": true, "or": true, "in": true, "on": true, "with": true, "tool": true, "tools": true}

// searchWords splits s into lower-case words (letters and digits), without
// stop words; a trailing plural "s" is dropped so "events" finds "event".
func searchWords(s string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if stopWords[w] {
			continue
		}
		out = append(out, stem(w))
	}
	return out
}

func stem(w string) string {
	if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
		return w[:len(w)-1]
	}
	return w
}

func containsWord(words []string, w string) bool {
	for _, x := range words {
		if x == w {
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
