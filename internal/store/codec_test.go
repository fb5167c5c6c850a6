package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/transcript"
)

func sampleEntries() []transcript.Entry {
	ts := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	return []transcript.Entry{
		{ID: "u", Type: transcript.TypeMessage, Time: ts, Message: &transcript.Message{
			Role: transcript.RoleUser, Text: "hi <b>&</b>", Source: "http",
			Images: []transcript.Image{{MimeType: "image/png", Data: "AAAA"}},
		}},
		{ID: "a", ParentID: "u", Type: transcript.TypeMessage, Time: ts, Message: &transcript.Message{
			Role: transcript.RoleAssistant, Thinking: "hmm", Model: "m", StopReason: transcript.StopToolUse,
			ToolCalls: []transcript.ToolCall{{ID: "c1", Name: "read", Args: json.RawMessage(`{ "path" : "a<b>.go" }`)}},
			Usage:     &transcript.Usage{Input: 1, Output: 2, Total: 3},
		}},
		{ID: "t", ParentID: "a", Type: transcript.TypeMessage, Time: ts.In(time.FixedZone("X", 3600)), Message: &transcript.Message{
			Role: transcript.RoleToolResult, ToolCallID: "c1", ToolName: "read", IsError: true,
			Details: json.RawMessage("{\n  \"exit\": 1\n}"),
		}},
		{ID: "c", ParentID: "t", Type: transcript.TypeCompaction, Time: ts,
			Compaction: &transcript.Compaction{Summary: "s", FirstKeptEntryID: "a", TokensBefore: 10}},
		{ID: "x", ParentID: "c", Type: transcript.TypeCustom, Time: ts,
			Custom: &transcript.Custom{Kind: "k", Data: json.RawMessage(`[1, 2, "\u2028"]`)}},
		{ID: "y", Type: transcript.TypeCustom, Custom: &transcript.Custom{Kind: "k"}},
	}
}

// entriesEqual compares two entries, times as instants with the same offset.
func entriesEqual(a, b transcript.Entry) bool {
	if !a.Time.Equal(b.Time) {
		return false
	}
	_, ao := a.Time.Zone()
	_, bo := b.Time.Zone()
	if ao != bo {
		return false
	}
	a.Time, b.Time = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func TestCodecRoundTrip(t *testing.T) {
	for _, e := range sampleEntries() {
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatalf("EncodeEntry(%s): %v", e.ID, err)
		}
		got, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("DecodeEntry(%s): %v", e.ID, err)
		}
		if want := canonical(e); !entriesEqual(want, got) {
			t.Errorf("round trip of %s:\n got  %s\n want %s", e.ID, dump(got), dump(want))
		}
		// Raw JSON is compacted on the way through.
		if got.Message != nil && got.Message.Details != nil && bytes.ContainsAny(got.Message.Details, " \n") {
			t.Errorf("details not compacted: %s", got.Message.Details)
		}
		b2, err := EncodeEntry(got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Errorf("encoding is not stable for %s:\n%s\n%s", e.ID, b, b2)
		}
	}
}

func TestCodecDoesNotMutateInput(t *testing.T) {
	e := sampleEntries()[1]
	before := string(e.Message.ToolCalls[0].Args)
	if _, err := EncodeEntry(e); err != nil {
		t.Fatal(err)
	}
	if after := string(e.Message.ToolCalls[0].Args); after != before {
		t.Errorf("EncodeEntry changed the caller's args: %q -> %q", before, after)
	}
}

func TestCodecEnvelope(t *testing.T) {
	b, err := EncodeEntry(transcript.Entry{ID: "e", Type: transcript.TypeMessage})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"v":1,"entry":{"id":"e"`) {
		t.Errorf("unexpected envelope: %s", b)
	}
}

func TestCodecRejects(t *testing.T) {
	for _, in := range []string{
		``, `null`, `[]`, `"x"`, `{}`, `{"v":1}`, `{"v":1,"entry":null}`, `{"v":2,"entry":{"id":"e"}}`,
		`{"entry":{"id":"e"}}`, `{"v":1,"entry":{"id":""}}`, `{"v":1,"entry":{"id":"e"}} trailing`,
		`{"v":1,"entry":{"id":"e","timestamp":"yesterday"}}`, `{"v":1,"entry":{"id":"e","message":[]}}`,
		"\xff\xfe", `{"v":1,"entry":{"id":"e","message":{"details":}}}`,
	} {
		if e, err := DecodeEntry([]byte(in)); err == nil {
			t.Errorf("DecodeEntry(%q) = %+v, want an error", in, e)
		}
	}
	bad := []transcript.Entry{
		{},
		{ID: "e", Message: &transcript.Message{Details: json.RawMessage(`{`)}},
		{ID: "e", Custom: &transcript.Custom{Data: json.RawMessage(`nope`)}},
		{ID: "e", Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, e := range bad {
		if _, err := EncodeEntry(e); err == nil {
			t.Errorf("EncodeEntry(%+v) succeeded, want an error", e)
		}
	}
}

func TestCodecInvalidUTF8(t *testing.T) {
	e := transcript.Entry{ID: "e\xff", Custom: &transcript.Custom{Kind: "k\xfe", Data: json.RawMessage("\"a\xffb\"")}}
	b, err := EncodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	if !isUTF8(b) {
		t.Errorf("encoding is not valid UTF-8: %q", b)
	}
}

// dump shows an entry with its pointees, for failure messages.
func dump(e transcript.Entry) string {
	s := fmt.Sprintf("%#v", e)
	if e.Message != nil {
		s += fmt.Sprintf("\n  message: %#v", *e.Message)
	}
	if e.Compaction != nil {
		s += fmt.Sprintf("\n  compaction: %#v", *e.Compaction)
	}
	if e.Custom != nil {
		s += fmt.Sprintf("\n  custom: %#v", *e.Custom)
	}
	return s
}

func isUTF8(b []byte) bool { return strings.ToValidUTF8(string(b), "\uFFFD") == string(b) }

// FuzzCodec decodes arbitrary bytes: decoding must never panic, and whatever
// decodes must survive encode → decode unchanged.
func FuzzCodec(f *testing.F) {
	for _, e := range sampleEntries() {
		b, err := EncodeEntry(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		``, `{}`, `null`, `{"v":1,"entry":{"id":"e"}}`,
		`{"v":1,"entry":{"id":"e","message":{"role":"user","images":[],"toolCalls":[{"id":"c"}],"details":null}}}`,
		`{"v":1,"entry":{"id":"e","timestamp":"2025-01-01T00:00:00+05:30","custom":{"customType":"k","data":{"a" : [1, 2.50, "<&>"]}}}}`,
		`{"v":1,"entry":{"id":"e","message":{"toolCalls":[{"id":"c","args":"\u2028 \ud800"}],"details":"\xff"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEntry(data)
		if err != nil {
			return
		}
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatalf("decoded entry does not encode: %v\ninput %q\nentry %#v", err, data, e)
		}
		if !isUTF8(b) {
			t.Fatalf("encoding is not valid UTF-8: %q", b)
		}
		e2, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("re-encoded entry does not decode: %v\n%s", err, b)
		}
		if !entriesEqual(e, e2) {
			t.Fatalf("round trip changed the entry:\ninput %q\nfirst  %s\nsecond %s", data, dump(e), dump(e2))
		}
		b2, err := EncodeEntry(e2)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("encoding not stable (%v):\n%s\n%s", err, b, b2)
		}
	})
}
