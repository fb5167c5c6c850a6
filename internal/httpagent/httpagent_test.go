package httpagent_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/httpagent"
)

// A refused request ends the turn with the server's message and code, not
// with its JSON body as text.
func TestRefusalCarriesMessageAndCode(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":"the session is busy; resend later","code":"session_busy"}`))
	}))
	defer srv.Close()
	a := &httpagent.Agent{BaseURL: srv.URL}
	_, err := agent.Collect(a.Invoke(context.Background(), agent.Scope{Session: "s"}, agent.Prompt{Text: "hi"}))
	var f *agent.Failure
	if !errors.As(err, &f) {
		t.Fatalf("want a *agent.Failure, got %v", err)
	}
	if f.Code != agent.CodeSessionBusy || !strings.HasSuffix(f.Details, ": the session is busy; resend later") || f.Retryable {
		t.Fatalf("failure = %+v", f)
	}
}
