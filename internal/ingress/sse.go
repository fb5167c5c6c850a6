package ingress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/fastagent/fastagent/agent"
)

// WriteEvent writes one event as an SSE frame: "data: <event JSON>\n\n".
// JSON never contains a raw newline, so one data line always suffices.
func WriteEvent(w io.Writer, ev agent.Event) error { return WriteEventID(w, "", ev) }

// WriteEventID writes one event as an SSE frame with the id
// "<key>.<ev.Seq>" when both are set, so that a client can resume after it
// with Last-Event-ID.
func WriteEventID(w io.Writer, key string, ev agent.Event) error {
	var buf bytes.Buffer
	if key != "" && ev.Seq > 0 {
		fmt.Fprintf(&buf, "id: %s.%d\n", key, ev.Seq)
	}
	buf.WriteString("data: ")
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil { // Encode ends the line
		return fmt.Errorf("ingress: encode event: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}
