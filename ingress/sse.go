package ingress

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/fastagent/fastagent/agent"
)

// WriteEvent writes one event as an SSE frame: "data: <event JSON>\n\n".
// JSON never contains a raw newline, so one data line always suffices.
func WriteEvent(w io.Writer, ev agent.Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("ingress: encode event: %w", err)
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, '\n', '\n')
	_, err = w.Write(buf)
	return err
}
