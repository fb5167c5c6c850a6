package pisession

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/transcript"
)

func TestDecodeGoldenPiSession(t *testing.T) {
	f, err := os.Open("testdata/pi-session.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, entries, err := Decode(f)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if h.ID != "0b6f3c1e-4a52-4d8e-9c1f-2f1a7d3e5b90" || h.Version != 3 || h.Cwd != "/home/dev/project" {
		t.Errorf("header = %+v", h)
	}
	if len(entries) != 10 {
		t.Fatalf("%d entries, want 10", len(entries))
	}
	byID := map[string]transcript.Entry{}
	for _, e := range entries {
		byID[e.ID] = e
	}
	if e := byID["a1b2c3d4"]; e.Type != transcript.TypeCustom || e.Custom.Kind != "pi:model_change" || e.ParentID != "" {
		t.Errorf("model_change = %+v", e)
	}
	a := byID["d4e5f6a7"].Message
	if a.Role != "assistant" || a.Thinking != "I should read the file." || len(a.ToolCalls) != 1 ||
		a.ToolCalls[0].Name != "read" || string(a.ToolCalls[0].Args) != `{"path":"main.go"}` ||
		a.Model != "anthropic/claude-sonnet-4-5" || a.Usage.Total != 853 || a.StopReason != "toolUse" {
		t.Errorf("assistant = %+v", a)
	}
	if r := byID["e5f6a7b8"].Message; r.Role != "toolResult" || r.ToolCallID != "toolu_01" || !strings.HasPrefix(r.Text, "package main") {
		t.Errorf("tool result = %+v", r)
	}
	if c := byID["b8c9d0e1"].Compaction; c == nil || c.FirstKeptEntryID != "f6a7b8c9" || c.TokensBefore != 1700 {
		t.Errorf("compaction = %+v", byID["b8c9d0e1"])
	}
	if b := byID["c9d0e1f2"].BranchSummary; b == nil || b.FromID != "f6a7b8c9" {
		t.Errorf("branch summary = %+v", byID["c9d0e1f2"])
	}
	if u := byID["d0e1f2a3"]; u.Message.Text != "And now?" || u.Time != time.Date(2026, 11, 20, 9, 22, 0, 0, time.UTC) {
		t.Errorf("string content = %+v", u)
	}
	// The model context: summary, kept entries, branch summary, prompt.
	msgs := transcript.Context(entries)
	if len(msgs) != 4 || !strings.Contains(msgs[0].Text, "Understand main.go") || msgs[1].Text != `It prints "hi".` ||
		!strings.Contains(msgs[2].Text, "Tried renaming main") || msgs[3].Text != "And now?" {
		t.Errorf("context = %+v", msgs)
	}
}

func TestRoundTrip(t *testing.T) {
	raw, err := os.ReadFile("testdata/pi-session.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	h, entries, err := Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, transcript.Entry{ID: "x1", ParentID: "d0e1f2a3", Type: transcript.TypeMessage, Time: time.Unix(1, 5).UTC(),
		Message: &transcript.Message{Role: "user", Text: "look", Images: []transcript.Image{{MimeType: "image/png", Data: "iVBO"}}, Source: "http"}})
	var buf bytes.Buffer
	if err := Encode(&buf, h, entries); err != nil {
		t.Fatal(err)
	}
	// pi verbatim lines survive byte for byte.
	if !strings.Contains(buf.String(), `"targetId":"c3d4e5f6","label":"start"`) {
		t.Errorf("label line lost:\n%s", buf.String())
	}
	for i, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if !json.Valid([]byte(l)) {
			t.Errorf("line %d is not JSON: %s", i+1, l)
		}
	}
	h2, again, err := Decode(&buf)
	if err != nil {
		t.Fatalf("Decode(Encode): %v", err)
	}
	if h2.ID != h.ID {
		t.Errorf("header id %q, want %q", h2.ID, h.ID)
	}
	if !reflect.DeepEqual(norm(t, again), norm(t, entries)) {
		t.Errorf("round trip differs:\n got %s\nwant %s", norm(t, again), norm(t, entries))
	}
}

// norm compares entries by their JSON (raw fields compacted).
func norm(t *testing.T, es []transcript.Entry) string {
	b, err := json.Marshal(es)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	_ = json.Unmarshal(b, &v)
	b, _ = json.Marshal(v)
	return string(b)
}

func TestDecodeRejects(t *testing.T) {
	const head = `{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00Z","cwd":"/"}` + "\n"
	const user = `{"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"hi","timestamp":0}}` + "\n"
	cases := []struct {
		name, in string
		line     int
		msg      string
	}{
		{"not json", head + "{nope\n", 2, "not a JSON object"},
		{"no id", head + `{"type":"message","parentId":null,"message":{"role":"user","content":"x"}}` + "\n", 2, "no id"},
		{"unknown parent", head + user + `{"type":"message","id":"u2","parentId":"zz","message":{"role":"user","content":"x"}}` + "\n", 3, "parent"},
		{"duplicate id", head + user + user, 3, "twice"},
		{"bad role", head + `{"type":"message","id":"u1","message":{"role":"system","content":"x"}}` + "\n", 2, "role"},
		{"bad timestamp", head + `{"type":"message","id":"u1","timestamp":"yesterday","message":{"role":"user","content":"x"}}` + "\n", 2, "RFC 3339"},
		{"late header", user + head, 2, "first line"},
		{"message without message", head + `{"type":"message","id":"u1"}` + "\n", 2, "no message"},
		{"tool result without call", head + `{"type":"message","id":"u1","message":{"role":"toolResult","content":[]}}` + "\n", 2, "toolCallId"},
		{"newer version", `{"type":"session","version":9,"id":"s"}` + "\n", 1, "newer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, es, err := Decode(strings.NewReader(c.in))
			var le *LineError
			if !errors.As(err, &le) || le.Line != c.line || !strings.Contains(err.Error(), c.msg) || es != nil {
				t.Errorf("Decode = %v entries, %v; want line %d error containing %q", len(es), err, c.line, c.msg)
			}
		})
	}
}
