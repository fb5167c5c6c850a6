package e2e

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/interceptor"

	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/internal/tracing"
	"github.com/fastagent/fastagent/workflows"
)

// One turn with a tool call, sent over HTTP to a session that already ran a
// turn, is one connected trace: the HTTP span is its root and every other
// span (the update sent, the update handled, the model and tool activities)
// hangs from a span of the same trace.
func TestTracingOneTurn(t *testing.T) {
	e := newEnv(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.New(tp)
	icpt, err := tr.Interceptor()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := tclient.Dial(context.Background(), tclient.Config{
		Address: server.FrontendAddress(), APIKey: server.APIKey(), Plaintext: true, Namespace: server.Namespace(),
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})),
		Interceptors: []interceptor.ClientInterceptor{icpt},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.client = cl
	e.agent = e.runtime().Agent(cl)
	e.startWorker() // built on the traced client: traced too
	srv := e.server(e.agent)
	srv.NoAuth = true
	srv.SetReady(true)
	hs := httptest.NewServer(tr.Middleware(srv.Handler()))
	t.Cleanup(hs.Close)

	e.write("notes.txt", "hello")
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"hi"}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: "read", Args: `{"path":"notes.txt"}`}}},
		modelserver.Reply{Text: []string{"read it"}},
	)
	for _, text := range []string{"hello", "read notes.txt"} {
		resp, err := http.Post(hs.URL+"/invoke", "application/json", strings.NewReader(`{"session":"traced","text":"`+text+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"type":"completed"`) {
			t.Fatalf("turn %q: %d %s", text, resp.StatusCode, body)
		}
	}
	// The HTTP span ends once the handler returned, after the client read
	// the end of the stream: wait for both roots. The update's handler span
	// ends later: the turn's last model step recorded and published the
	// answer, so the stream ended before the workflow heard of that step;
	// wait for it too, in the later root's trace.
	var roots []sdktrace.ReadOnlySpan
	wait.Until(30*time.Second, func() bool { // the checks below say what is wrong
		roots = roots[:0]
		ended := rec.Ended()
		for _, s := range ended {
			if s.Name() == "POST /invoke" {
				roots = append(roots, s)
			}
		}
		if len(roots) != 2 {
			return false
		}
		later := roots[0]
		if roots[1].StartTime().After(later.StartTime()) {
			later = roots[1]
		}
		for _, s := range ended {
			if s.Name() == "HandleUpdate:"+workflows.UpdateTurn && s.SpanContext().TraceID() == later.SpanContext().TraceID() {
				return true
			}
		}
		return false
	})
	if len(roots) != 2 {
		t.Fatalf("%d ended HTTP spans, want 2", len(roots))
	}
	root := roots[0]
	if roots[1].StartTime().After(root.StartTime()) {
		root = roots[1]
	}
	if root.Parent().IsValid() {
		t.Fatalf("the HTTP span has a parent %v", root.Parent())
	}
	id := root.SpanContext().TraceID()
	spans := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	names := map[string]bool{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == id {
			spans[s.SpanContext().SpanID()] = s
			names[s.Name()] = true
		}
	}
	for _, want := range []string{
		"POST /invoke",
		"UpdateWithStartWorkflow:" + workflows.UpdateTurn,
		"HandleUpdate:" + workflows.UpdateTurn,
		"StartActivity:" + workflows.ActivityModelGenerate,
		"RunActivity:" + workflows.ActivityModelGenerate,
		"StartActivity:" + workflows.ActivityToolExecute,
		"RunActivity:" + workflows.ActivityToolExecute,
	} {
		if !names[want] {
			t.Errorf("the turn's trace lacks span %q", want)
		}
	}
	for _, s := range spans {
		if s == root {
			continue
		}
		if _, ok := spans[s.Parent().SpanID()]; !ok || s.Parent().TraceID() != id {
			t.Errorf("span %q hangs from %v, not from a span of the turn's trace", s.Name(), s.Parent())
		}
	}
	// The first turn is another trace: nothing of it leaked into this one.
	if n := countNamed(spans, "RunActivity:"+workflows.ActivityModelGenerate); n != 2 {
		t.Errorf("%d model activity spans in the trace, want 2 (the tool step's two model calls)", n)
	}
	if t.Failed() {
		for _, s := range spans {
			t.Logf("span %s %s parent %s", s.SpanContext().SpanID(), s.Name(), s.Parent().SpanID())
		}
	}
}

func countNamed(spans map[trace.SpanID]sdktrace.ReadOnlySpan, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name() == name {
			n++
		}
	}
	return n
}
