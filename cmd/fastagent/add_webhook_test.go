package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/webhook"
)

// countStarter counts Signal-With-Start calls.
type countStarter struct {
	mu sync.Mutex
	n  int
}

func (s *countStarter) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return nil, nil
}

// add webhook writes an endpoint file for each scheme and prints its
// secret; with that secret set, hook send signs a test event the endpoint
// accepts (one turn handed off).
func TestAddWebhookThenHookSend(t *testing.T) {
	for _, scheme := range []string{"standard", "hmac", "token"} {
		t.Run(scheme, func(t *testing.T) {
			dir := t.TempDir()
			out, errOut, code := execute(t, "", "-C", dir, "add", "webhook", "orders", "--scheme", scheme)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			m := regexp.MustCompile(`export (HOOK_ORDERS_SECRET)='([^']+)'`).FindStringSubmatch(out)
			if m == nil || !strings.Contains(out, "fastagent hook send orders --data @event.json") {
				t.Fatalf("output lacks the secret or the test command:\n%s", out)
			}
			t.Setenv(m[1], m[2])
			file := filepath.Join(dir, "channels", "webhooks", "orders.yaml")
			ch, err := webhook.LoadFile(file, os.Getenv)
			if err != nil {
				t.Fatalf("the written file does not load: %v", err)
			}
			st := &countStarter{}
			srv := httptest.NewServer(ch.Door.(channels.Served).Handler(st, "q", nil, nil))
			defer srv.Close()
			event := filepath.Join(dir, "event.json")
			if err := os.WriteFile(event, []byte(`{"type":"test","text":"hello"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			out, errOut, code = execute(t, "", "-C", dir, "hook", "send", "orders", "--data", "@"+event, "--url", srv.URL)
			if code != 0 || !strings.Contains(out, "202 Accepted") || !strings.Contains(out, `"turn":"hook:orders:`) {
				t.Fatalf("hook send: exit %d: %s %s", code, out, errOut)
			}
			if st.n != 1 {
				t.Errorf("%d turns handed off, want 1", st.n)
			}
			// The file exists now: no overwrite without --force.
			if _, _, code := execute(t, "", "-C", dir, "add", "webhook", "orders", "--scheme", scheme); code == 0 {
				t.Error("overwrote an existing file")
			}
		})
	}
	if _, _, code := execute(t, "", "-C", t.TempDir(), "add", "webhook", "Bad Name"); code == 0 {
		t.Error("accepted a bad name")
	}
}
