package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Memory is one long-term memory of an agent: a fact the agent chose to
// keep (the remember tool), found again by full-text search (recall).
type Memory struct {
	ID string `json:"id"`
	// Agent is the agent that keeps it (its task queue name).
	Agent string `json:"agent"`
	// Owner is the principal it belongs to; "" is a shared memory, seen by
	// every principal of the agent.
	Owner   string    `json:"owner,omitempty"`
	Text    string    `json:"text"`
	Tags    []string  `json:"tags,omitempty"`
	Session string    `json:"session,omitempty"`
	Created time.Time `json:"created"`
}

// Shared reports whether m is a shared (team) memory.
func (m Memory) Shared() bool { return m.Owner == "" }

// MemoryScope says which memories an operation may see or change.
type MemoryScope struct {
	// Agent keeps the agent's memories only; "" every agent's.
	Agent string
	// Owners are the owners in scope ("" the shared memories). Empty
	// without All: nothing is in scope.
	Owners []string
	// All puts every owner in scope (an admin's listing).
	All bool
}

// MemoryQuery selects memories for Recall.
type MemoryQuery struct {
	MemoryScope
	// Text, when set, ranks memories by full-text relevance to it and
	// keeps only those matching one of its words; "" lists newest first.
	Text string
	// Limit bounds the result (0: DefaultRecall; at most MaxRecall).
	Limit int
}

// Bounds of memories.
const (
	DefaultRecall = 5
	MaxRecall     = 500
	// MaxMemoryBytes bounds one memory's text; MaxMemoryTags its tags.
	MaxMemoryBytes = 4 << 10
	MaxMemoryTags  = 16
	maxTagBytes    = 64
)

// MemoryID is the ID of the memory a remember call with idempotency key
// key stores in agent: the same call retried names the same memory.
func MemoryID(agent, key string) string {
	h := sha256.Sum256([]byte(agent + "\x00" + key))
	return "mem_" + hex.EncodeToString(h[:10])
}

// scopeToken is the full-text term naming the memories of owner in agent
// (SQLite), one word of letters and digits.
func scopeToken(agent, owner string) string {
	h := sha256.Sum256([]byte(agent + "\x00" + owner))
	return "scope" + hex.EncodeToString(h[:10])
}

// validMemory checks a memory before it is stored.
func validMemory(m Memory, key string) error {
	switch {
	case m.Agent == "":
		return errors.New("store: remember: empty agent")
	case key == "":
		return errors.New("store: remember: empty idempotency key")
	case strings.TrimSpace(m.Text) == "":
		return errors.New("store: remember: empty text")
	case len(m.Text) > MaxMemoryBytes:
		return fmt.Errorf("store: remember: text of %d bytes exceeds %d", len(m.Text), MaxMemoryBytes)
	case !utf8.ValidString(m.Text):
		return errors.New("store: remember: text is not valid UTF-8")
	case len(m.Tags) > MaxMemoryTags:
		return fmt.Errorf("store: remember: %d tags exceed %d", len(m.Tags), MaxMemoryTags)
	}
	for _, t := range m.Tags {
		if t == "" || len(t) > maxTagBytes || !utf8.ValidString(t) {
			return fmt.Errorf("store: remember: tag %q must be 1 to %d bytes of UTF-8", t, maxTagBytes)
		}
	}
	return nil
}

func encodeTags(tags []string) string {
	if len(tags) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(tags)
	return string(b)
}

func decodeTags(s string) []string {
	var tags []string
	_ = json.Unmarshal([]byte(s), &tags)
	if len(tags) == 0 {
		return nil
	}
	return tags
}

func recallLimit(n int) int {
	switch {
	case n <= 0:
		return DefaultRecall
	case n > MaxRecall:
		return MaxRecall
	}
	return n
}

// searchWords splits a recall query into its words (letters and digits),
// lower-cased and deduplicated, at most 32: each becomes a quoted term of
// the drivers' full-text query, so no query syntax reaches them.
func searchWords(text string) []string {
	var out []string
	seen := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if !seen[w] && len(out) < 32 {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// scopeSQL is the WHERE clause of scope for a driver whose n-th
// placeholder is ph(n), starting at placeholder first, and its arguments.
// A scope with no owners and not All matches nothing.
func scopeSQL(scope MemoryScope, first int, ph func(int) string) (string, []any) {
	var conds []string
	var args []any
	n := first
	if scope.Agent != "" {
		conds = append(conds, "agent = "+ph(n))
		args = append(args, scope.Agent)
		n++
	}
	if !scope.All {
		if len(scope.Owners) == 0 {
			return "1 = 0", nil
		}
		var in []string
		for _, o := range scope.Owners {
			in = append(in, ph(n))
			args = append(args, o)
			n++
		}
		conds = append(conds, "owner IN ("+strings.Join(in, ", ")+")")
	}
	if len(conds) == 0 {
		return "1 = 1", nil
	}
	return strings.Join(conds, " AND "), args
}

// prefixCols qualifies the columns scopeSQL names with the table alias p.
func prefixCols(where, p string) string {
	where = strings.ReplaceAll(where, "agent = ", p+"agent = ")
	return strings.ReplaceAll(where, "owner IN (", p+"owner IN (")
}
