package telegram

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// recStarter records Signal-With-Start calls.
type recStarter struct {
	mu    sync.Mutex
	calls []wire.ChatMessage
}

func (s *recStarter) SignalWithStartWorkflow(_ context.Context, _ string, _ string, arg interface{},
	_ client.StartWorkflowOptions, _ interface{}, _ ...interface{}) (client.WorkflowRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, arg.(wire.ChatMessage))
	return nil, nil
}

// TestHandlerRefusesBadSecret: through the shared webhook handler, a
// wrong or missing secret token is 401 and hands nothing to Temporal; the
// right one is 200 and hands the message to its chat workflow.
func TestHandlerRefusesBadSecret(t *testing.T) {
	t.Parallel()
	st := &recStarter{}
	d := testDoor(wire.GroupContext)
	srv := httptest.NewServer(channels.Handler(d, st, "", nil))
	defer srv.Close()
	body := fixture(t, "private.json")
	post := func(secret string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		if secret != "" {
			req.Header.Set(SecretHeader, secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, s := range []string{"", "nope", d.Secret + "x"} {
		if code := post(s); code != http.StatusUnauthorized {
			t.Errorf("secret %q: %d, want 401", s, code)
		}
	}
	if len(st.calls) != 0 {
		t.Fatalf("refused requests handed %d messages", len(st.calls))
	}
	if code := post(d.Secret); code != http.StatusOK || len(st.calls) != 1 || st.calls[0].Chat != "424242" {
		t.Errorf("accepted request: %d, calls %+v", code, st.calls)
	}
}
