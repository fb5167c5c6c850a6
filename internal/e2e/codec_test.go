package e2e

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/workflows"
)

var (
	keyA = codec.Key{ID: "key-a", Key: bytes.Repeat([]byte{0xa}, 32)}
	keyB = codec.Key{ID: "key-b", Key: bytes.Repeat([]byte{0xb}, 32)}
)

// useCodec redials the env's client with c (nil: a plain client, which
// reads history as stored) and rebuilds its durable agent on it.
func (e *env) useCodec(c *codec.Codec, mh *metrics.Metrics) {
	e.t.Helper()
	cfg := tclient.Config{
		Address: server.FrontendAddress(), APIKey: server.APIKey(), Plaintext: true, Namespace: server.Namespace(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})),
		Codec:  c, Plain: c == nil,
	}
	if mh != nil {
		cfg.MetricsHandler = mh.SDKHandler()
	}
	cl, err := tclient.Dial(context.Background(), cfg)
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	e.t.Cleanup(cl.Close)
	e.client = cl
	e.agent = e.runtime().Agent(cl)
}

func newCodec(t *testing.T, keys ...codec.Key) *codec.Codec {
	t.Helper()
	c, err := codec.New(keys, true)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawHistory reads a session's whole history through a plain client.
func rawHistory(t *testing.T, e *env, session string) *historypb.History {
	t.Helper()
	plain := &env{t: t, kit: e.kit, bus: e.bus, queue: e.queue}
	plain.useCodec(nil, nil)
	id := workflows.WorkflowID(session)
	settleLatest(t, plain, id)
	h := &historypb.History{}
	for _, run := range runIDs(t, plain, id) {
		h.Events = append(h.Events, fetchHistory(t, plain, id, run).Events...)
	}
	return h
}

// updateInputs are the payloads of the history's accepted updates (the prompts).
func updateInputs(h *historypb.History) []*commonpb.Payload {
	var out []*commonpb.Payload
	for _, ev := range h.Events {
		if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil {
			out = append(out, a.GetAcceptedRequest().GetInput().GetArgs().GetPayloads()...)
		}
	}
	return out
}

// decodeThrough posts payloads to the codec server's /codec/decode.
func decodeThrough(t *testing.T, url, token string, ps []*commonpb.Payload) (int, string) {
	t.Helper()
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: ps})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/codec/decode", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Namespace", server.Namespace())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, string(b)
	}
	var out commonpb.Payloads
	if err := protojson.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, p := range out.Payloads {
		text.Write(p.Data)
	}
	return resp.StatusCode, text.String()
}

// codecServer serves c as `fastagent codec-server` does, to the holder of
// "codec-token" (the codec right).
func codecServer(t *testing.T, c *codec.Codec) *httptest.Server {
	t.Helper()
	h, err := serve.CodecServer(serve.CodecServerConfig{Codec: c, Host: "127.0.0.1", Origins: []string{},
		APITokens: "ops:codec:" + ingress.HashToken("codec-token")})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs
}

// With codec keys, a canary in a prompt (and in the answer) never appears
// in the raw history bytes; the codec server decodes the prompt for whoever
// holds a codec token and for nobody else.
func TestCodecHistoryEncrypted(t *testing.T) {
	e := newEnv(t)
	cdc := newCodec(t, keyA)
	e.useCodec(cdc, nil)
	e.startWorker()
	const canary = "CANARY-7f3e9b-do-not-leak"
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"echo ", canary}})
	evs := collect(t, e.agent, context.Background(), "codec-canary", "remember "+canary)
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
		t.Fatalf("turn: %s", describe(evs))
	}
	h := rawHistory(t, e, "codec-canary")
	raw, err := proto.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(canary)) || bytes.Contains(raw, []byte("CANARY")) {
		t.Fatal("the canary appears in raw history bytes")
	}
	if !bytes.Contains(raw, []byte(codec.Encoding)) || !bytes.Contains(raw, []byte(keyA.ID)) {
		t.Fatal("history holds no payload encrypted with key-a")
	}
	inputs := updateInputs(h)
	if len(inputs) == 0 {
		t.Fatal("no accepted update in history")
	}
	hs := codecServer(t, cdc)
	if code, text := decodeThrough(t, hs.URL, "codec-token", inputs); code != 200 || !strings.Contains(text, canary) {
		t.Fatalf("decode through the codec server: %d %q", code, text)
	}
	if code, text := decodeThrough(t, hs.URL, "", inputs); code != http.StatusUnauthorized || strings.Contains(text, canary) {
		t.Fatalf("decode without a token: %d %q", code, text)
	}
}

// A history written with key A still replays, runs on and decodes once the
// keys become B,A; new payloads are encrypted with B.
func TestCodecRotation(t *testing.T) {
	e := newEnv(t)
	e.useCodec(newCodec(t, keyA), nil)
	w := e.startWorker()
	const session = "codec-rotation"
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"first answer"}})
	if term := agenttest.CheckTerminal(t, collect(t, e.agent, context.Background(), session, "first CANARY-A")); term.Type != agent.TypeCompleted {
		t.Fatalf("turn under key A: %+v", term)
	}
	before := rawHistory(t, e, session)
	w.Stop()

	rotated := newCodec(t, keyB, keyA)
	replayer, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{
		DataConverter: rotated.DataConverter(), FailureConverter: rotated.FailureConverter()})
	if err != nil {
		t.Fatal(err)
	}
	replayer.RegisterWorkflowWithOptions(workflows.SessionWorkflow, workflow.RegisterOptions{Name: workflows.SessionWorkflowType})
	if err := replayer.ReplayWorkflowHistory(nil, before); err != nil {
		t.Fatalf("replay of the key-A history with keys B,A: %v", err)
	}

	// A fresh worker (no cached state: it replays the key-A history) with B,A.
	e.useCodec(rotated, nil)
	e.startWorker()
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"second answer"}})
	evs := collect(t, e.agent, context.Background(), session, "second CANARY-B")
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
		t.Fatalf("turn after rotation: %s", describe(evs))
	}
	after := rawHistory(t, e, session)
	inputs := updateInputs(after)
	if len(inputs) != 2 {
		t.Fatalf("%d accepted updates, want 2", len(inputs))
	}
	if got := string(inputs[0].Metadata[codec.MetadataKeyID]); got != keyA.ID {
		t.Errorf("first prompt encrypted with %q, want key-a", got)
	}
	if got := string(inputs[1].Metadata[codec.MetadataKeyID]); got != keyB.ID {
		t.Errorf("prompt after rotation encrypted with %q, want key-b", got)
	}
	hs := codecServer(t, rotated)
	if code, text := decodeThrough(t, hs.URL, "codec-token", inputs); code != 200 || !strings.Contains(text, "CANARY-A") || !strings.Contains(text, "CANARY-B") {
		t.Fatalf("decode of both prompts after rotation: %d %q", code, text)
	}
	// Without key A the old prompt is a clear error, not garbage.
	if code, text := decodeThrough(t, codecServer(t, newCodec(t, keyB)).URL, "codec-token", inputs[:1]); code != http.StatusBadRequest || !strings.Contains(text, "key-a") {
		t.Fatalf("decode with key B only: %d %q", code, text)
	}
}

// GET /metrics after a few turns (one with a tool call, one queued behind
// another) and a webhook shows each of fastagent's metrics moved, and the
// SDK's; without a token it is refused.
func TestMetricsScrape(t *testing.T) {
	e := newEnv(t)
	m := metrics.New()
	e.useCodec(nil, m)
	m.WatchSessions(e.client, time.Nanosecond)                                  // count on every scrape
	e.startWorker(func(c *serve.Config, _ *serve.Components) { c.Metrics = m }) // observes model calls, intercepts the worker
	e.write("notes.txt", "hello")
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: "read", Args: `{"path":"notes.txt"}`}}},
		modelserver.Reply{Text: []string{"read it"}},
		modelserver.Reply{Text: []string{"two"}},
	)
	for _, p := range []string{"read notes.txt", "say two"} {
		if term := agenttest.CheckTerminal(t, collect(t, e.agent, context.Background(), "metrics", p)); term.Type != agent.TypeCompleted {
			t.Fatalf("turn %q: %+v", p, term)
		}
	}
	toks := &ingress.Tokens{}
	toks.AddToken("prom", "metrics-token", ingress.RightMetrics)
	toks.AddToken("alice", "alice-token", ingress.RightInvoke, ingress.RightControl)
	srv := e.server(e.agent)
	srv.Tokens, srv.Metrics = toks, m.Handler()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	for token, want := range map[string]int{"": 401, "alice-token": 403} {
		if code, _, _ := send(t, http.MethodGet, hs.URL+"/metrics", token, "", nil); code != want {
			t.Errorf("scrape with token %q: %d, want %d", token, code, want)
		}
	}
	scrapeMetrics := func() string {
		t.Helper()
		code, body, _ := send(t, http.MethodGet, hs.URL+"/metrics", "metrics-token", "", nil)
		if code != 200 {
			t.Fatalf("scrape: %d %s", code, body)
		}
		return body
	}
	// waitFor scrapes until the scrape has want (the worker records
	// asynchronously from the caller's view).
	waitFor := func(want string) {
		t.Helper()
		var scrape string
		if !wait.Until(30*time.Second, func() bool { scrape = scrapeMetrics(); return strings.Contains(scrape, want) }) {
			t.Fatalf("scrape never showed %q:\n%s", want, grepLines(scrape, "fastagent_"))
		}
	}

	// A turn waits behind a held one: the queue depth shows it, then drains.
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	e.kit.Model.EnqueueFor("hold me", modelserver.Reply{Text: []string{"held"}, Hold: release})
	e.kit.Model.EnqueueFor("queued", modelserver.Reply{Text: []string{"after"}})
	done := make(chan []agent.Event, 2)
	go func() { done <- collect(t, e.agent, context.Background(), "metrics-q", "hold me") }()
	waitFor("fastagent_turns_started_total 3")
	go func() { done <- collect(t, e.agent, context.Background(), "metrics-q", "queued") }()
	waitFor(workflows.MetricTurnQueueDepth + " 1")
	releaseOnce()
	for range 2 {
		if term := agenttest.CheckTerminal(t, <-done); term.Type != agent.TypeCompleted {
			t.Fatalf("queued session turn: %+v", term)
		}
	}
	waitFor(workflows.MetricTurnQueueDepth + " 0")

	// A Slack door answers its URL check: the ACK latency by channel moves.
	door := httptest.NewServer(m.WrapDoor("slack", channels.Handler(&slack.Door{SigningSecret: slackSecret}, e.client, e.queue, nil)))
	t.Cleanup(door.Close)
	challenge := []byte(`{"token":"x","challenge":"c-1","type":"url_verification"}`)
	req, _ := http.NewRequest(http.MethodPost, door.URL+"/slack", bytes.NewReader(challenge))
	req.Header = slack.Sign(slackSecret, time.Now(), challenge)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("slack url_verification: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	body := scrapeMetrics()
	for _, want := range []string{
		"fastagent_turns_started_total 4",
		`fastagent_turns_finished_total{code="",status="completed"} 4`,
		`fastagent_turn_duration_seconds_count{status="completed"} 4`,
		`fastagent_model_call_duration_seconds_count{outcome="ok"} 5`,
		`fastagent_model_first_token_seconds_count{model="`,
		`fastagent_model_tokens_total{kind="input",model="`,
		`fastagent_model_tokens_total{kind="output",model="`,
		`fastagent_tool_calls_total{outcome="ok",tool="read"} 1`,
		workflows.MetricTurnQueueDepth + " 0",
		"fastagent_active_sessions ",
		`fastagent_webhook_ack_seconds_count{channel="slack",status="2xx"} 1`,
		"temporal_request", // the SDK's own metrics
		"temporal_workflow_task_execution_latency_count",
		"temporal_activity_execution_latency_count",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	// Both sessions are open workflows (other tests' may be too; visibility
	// may lag a moment).
	var n float64
	if !wait.Until(30*time.Second, func() bool { n = metricValue(scrapeMetrics(), "fastagent_active_sessions"); return n >= 2 }) {
		t.Errorf("fastagent_active_sessions %v, want at least 2", n)
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", grepLines(body, "fastagent_", "temporal_"))
	}
}

// metricValue is the value of an unlabelled metric in a scrape (-1: absent).
func metricValue(body, name string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// With codec keys, failure messages are encrypted in history too: a
// provider's error carrying a canary fails the turn, yet the canary is in
// no event of the raw history (the activity's failure holds only "Encoded
// failure" and its encrypted attributes); the caller still reads the
// error — from the agent, over the ingress's SSE, and in an update
// rejection decoded by the client.
func TestCodecFailuresEncrypted(t *testing.T) {
	e := newEnv(t)
	e.useCodec(newCodec(t, keyA), nil)
	e.startWorker()
	const session = "codec-failure"
	const canary = "CANARY-FAIL-5c1d2e-do-not-leak"
	e.kit.Model.Enqueue(modelserver.Reply{Status: http.StatusBadRequest, Message: "invalid request: " + canary})
	evs := collect(t, e.agent, context.Background(), session, "fail please")
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeFailed || !strings.Contains(term.Details, canary) {
		t.Fatalf("turn: %s; want a failure naming the canary", describe(evs))
	}
	hs := e.ingress()
	e.kit.Model.Enqueue(modelserver.Reply{Status: http.StatusBadRequest, Message: "invalid request: " + canary})
	if st, body, _ := send(t, http.MethodPost, hs.URL+"/invoke", "", `{"session":"`+session+`","text":"fail again"}`, nil); st != http.StatusOK ||
		!strings.Contains(body, `"type":"failed"`) || !strings.Contains(body, canary) {
		t.Fatalf("SSE: %d %s; want a failed event naming the canary", st, body)
	}
	// An update rejection travels as a failure too: it decodes for the caller.
	if st, body, _ := send(t, http.MethodPost, hs.URL+"/sessions/"+session+"/approvals/no-such-call", "", `{"approve":true}`, nil); st != http.StatusNotFound ||
		!strings.Contains(body, `no tool call \"no-such-call\" is waiting for approval`) {
		t.Errorf("approve of an unknown call: %d %s; want a readable 404", st, body)
	}

	h := rawHistory(t, e, session)
	failed := 0
	for _, ev := range h.Events {
		if f := ev.GetActivityTaskFailedEventAttributes().GetFailure(); f != nil {
			failed++
			if f.GetMessage() != "Encoded failure" || f.GetEncodedAttributes() == nil {
				t.Errorf("event %d: activity failure %q is not encoded", ev.GetEventId(), f.GetMessage())
			}
		}
	}
	if failed == 0 {
		t.Fatal("no ActivityTaskFailed event: the provider's error never reached history")
	}
	raw, err := proto.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(canary)) || bytes.Contains(raw, []byte("CANARY")) {
		t.Fatal("the canary appears in raw history bytes")
	}
}
