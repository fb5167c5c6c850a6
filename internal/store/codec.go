package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fastagent/fastagent/transcript"
)

// CodecVersion is the version of the JSON envelope EncodeEntry writes and
// DecodeEntry accepts.
const CodecVersion = 1

// envelope is the stored form of an entry: {"v":1,"entry":{...}}.
type envelope struct {
	V     int               `json:"v"`
	Entry *transcript.Entry `json:"entry"`
}

// EncodeEntry returns the JSON stored for e: a versioned envelope around the
// entry's own JSON. The output is valid UTF-8 and canonical, so that
// DecodeEntry(EncodeEntry(e)) is stable.
func EncodeEntry(e transcript.Entry) ([]byte, error) {
	if e.ID == "" {
		return nil, errors.New("store: encode entry: empty id")
	}
	c := canonical(e)
	b, err := json.Marshal(envelope{V: CodecVersion, Entry: &c})
	if err != nil {
		return nil, fmt.Errorf("store: encode entry %q: %w", e.ID, err)
	}
	return b, nil
}

// DecodeEntry parses JSON written by EncodeEntry. It returns an error (never
// panics) for malformed input, an unknown version, a missing entry or an
// entry without an ID. The result is canonical: raw JSON fields are compacted
// and empty lists are nil, so encoding it again and decoding yields an equal
// entry.
func DecodeEntry(b []byte) (transcript.Entry, error) {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return transcript.Entry{}, fmt.Errorf("store: decode entry: %w", err)
	}
	if env.V != CodecVersion {
		return transcript.Entry{}, fmt.Errorf("store: decode entry: unsupported codec version %d (want %d)", env.V, CodecVersion)
	}
	if env.Entry == nil {
		return transcript.Entry{}, errors.New("store: decode entry: missing entry")
	}
	if env.Entry.ID == "" {
		return transcript.Entry{}, errors.New("store: decode entry: empty id")
	}
	return canonical(*env.Entry), nil
}

// canonical returns a copy of e in the form a JSON round trip produces:
// raw JSON compacted, HTML-escaped and valid UTF-8; empty lists nil; a nil
// tool call argument "null". It never modifies e's slices or pointees.
func canonical(e transcript.Entry) transcript.Entry {
	if e.Message != nil {
		m := *e.Message
		if len(m.Images) == 0 {
			m.Images = nil
		}
		if len(m.ToolCalls) == 0 {
			m.ToolCalls = nil
		} else {
			calls := make([]transcript.ToolCall, len(m.ToolCalls))
			for i, tc := range m.ToolCalls {
				tc.Args = canonicalRaw(tc.Args)
				if tc.Args == nil {
					tc.Args = json.RawMessage("null")
				}
				calls[i] = tc
			}
			m.ToolCalls = calls
		}
		if m.Usage != nil {
			u := *m.Usage
			m.Usage = &u
		}
		m.Details = canonicalRaw(m.Details)
		e.Message = &m
	}
	if e.Compaction != nil {
		c := *e.Compaction
		e.Compaction = &c
	}
	if e.BranchSummary != nil {
		b := *e.BranchSummary
		e.BranchSummary = &b
	}
	if e.Custom != nil {
		c := *e.Custom
		c.Data = canonicalRaw(c.Data)
		e.Custom = &c
	}
	return e
}

// canonicalRaw returns raw as encoding/json would emit it (compact, with
// <, >, & and U+2028/U+2029 escaped), with invalid UTF-8 replaced. Empty
// input yields nil; invalid JSON is returned unchanged so that encoding
// reports it.
func canonicalRaw(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	src := raw
	if !utf8.Valid(src) {
		src = []byte(strings.ToValidUTF8(string(src), "\uFFFD"))
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, src); err != nil {
		return raw
	}
	var out bytes.Buffer
	json.HTMLEscape(&out, compact.Bytes())
	return json.RawMessage(out.Bytes())
}
