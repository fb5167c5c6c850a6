package mcp

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// envAllowed reports whether the worker variable name is passed to stdio
// servers: PATH, HOME, USER, LANG, LC_*, TERM, TZ and TMPDIR.
func envAllowed(name string) bool {
	switch name {
	case "PATH", "HOME", "USER", "LANG", "TERM", "TZ", "TMPDIR":
		return true
	}
	return strings.HasPrefix(name, "LC_")
}

// commandEnv returns a stdio server's environment: the allowlisted worker
// variables, PWD when dir is set, then extra with ${NAME} references
// expanded from the worker's environment. missing lists the referenced
// variables that are not set.
func commandEnv(dir string, extra map[string]string) (env, missing []string) {
	vars := make(map[string]string)
	for _, kv := range os.Environ() {
		name, value, ok := strings.Cut(kv, "=")
		if ok && envAllowed(name) {
			vars[name] = value
		}
	}
	if dir != "" {
		if abs, err := filepath.Abs(dir); err == nil {
			vars["PWD"] = abs
		}
	}
	for name, value := range extra {
		vars[name] = expandVars(value, &missing)
	}
	env = make([]string, 0, len(vars))
	for name, value := range vars {
		env = append(env, name+"="+value)
	}
	slices.Sort(env)
	slices.Sort(missing)
	return env, slices.Compact(missing)
}

// expandVars replaces each ${NAME} in s by the worker's variable NAME (empty
// if unset, and then added to missing). Nothing else is expanded: "$NAME",
// "$" and "${not a name}" stay as written.
func expandVars(s string, missing *[]string) string {
	return expandRefs(s, func(name string) string {
		value, ok := os.LookupEnv(name)
		if !ok {
			*missing = append(*missing, name)
		}
		return value
	})
}

// EnvRefs returns the variable names s references as ${NAME}, in order: the
// only form an MCP server's env values expand (config checks use it to find
// secrets a server would receive).
func EnvRefs(s string) []string {
	var out []string
	expandRefs(s, func(name string) string { out = append(out, name); return "" })
	return out
}

// expandRefs replaces each ${NAME} in s by value(NAME).
func expandRefs(s string, value func(name string) string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.IndexByte(s[i+2:], '}')
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		name := s[i+2 : i+2+j]
		if !IsVarName(name) {
			b.WriteString(s[:i+2])
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		b.WriteString(value(name))
		s = s[i+2+j+1:]
	}
}

// IsVarName reports whether s is a shell variable name.
func IsVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

const (
	// stderrKeep is how much of a stdio server's stderr is kept.
	stderrKeep = 4096
	// stderrReportLines and stderrReportBytes bound the stderr tail quoted
	// in diagnostics and logs.
	stderrReportLines = 10
	stderrReportBytes = 1500
)

// stderrTail receives a stdio server's stderr: it keeps the end of it for
// diagnostics and logs each line at debug level.
type stderrTail struct {
	log *slog.Logger

	mu   sync.Mutex
	tail []byte // the last stderrKeep bytes
	line []byte // the current incomplete line
}

func newStderrTail(log *slog.Logger) *stderrTail {
	return &stderrTail{log: log}
}

// Write implements io.Writer.
func (s *stderrTail) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tail = append(s.tail, p...)
	if over := len(s.tail) - stderrKeep; over > 0 {
		s.tail = s.tail[:copy(s.tail, s.tail[over:])]
	}
	s.line = append(s.line, p...)
	for {
		i := bytes.IndexByte(s.line, '\n')
		if i < 0 {
			break
		}
		s.log.Debug("MCP server stderr", "line", string(bytes.TrimRight(s.line[:i], "\r")))
		s.line = s.line[:copy(s.line, s.line[i+1:])]
	}
	if len(s.line) > stderrKeep {
		s.log.Debug("MCP server stderr", "line", string(s.line))
		s.line = s.line[:0]
	}
	return len(p), nil
}

// String returns the last lines of stderr (at most stderrReportLines and
// about stderrReportBytes), trimmed.
func (s *stderrTail) String() string {
	s.mu.Lock()
	text := string(s.tail)
	full := len(s.tail) == stderrKeep
	s.mu.Unlock()
	if full {
		// The first line may be cut: drop it.
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			text = text[i+1:]
		}
	}
	text = strings.TrimSpace(text)
	lines := strings.Split(text, "\n")
	if len(lines) > stderrReportLines {
		lines = lines[len(lines)-stderrReportLines:]
	}
	text = strings.Join(lines, "\n")
	if len(text) > stderrReportBytes {
		text = "…" + strings.ToValidUTF8(text[len(text)-stderrReportBytes:], "")
	}
	return text
}
