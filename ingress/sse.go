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
func WriteEvent(w io.Writer, ev agent.Event) error {
	var buf bytes.Buffer
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
