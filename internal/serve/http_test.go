package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels/webhook"
	"github.com/fastagent/fastagent/internal/ingress"
)

// starterClient is a Temporal client whose only call the doors make,
// Signal-With-Start, is recorded; any other call panics (nothing else may
// happen in these tests).
type starterClient struct {
	client.Client
	st *fakeStarter
}

func (c starterClient) SignalWithStartWorkflow(ctx context.Context, id, signal string, arg interface{},
	o client.StartWorkflowOptions, wf interface{}, args ...interface{}) (client.WorkflowRun, error) {
	return c.st.SignalWithStartWorkflow(ctx, id, signal, arg, o, wf, args...)
}

const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// hookAgent writes an agent folder with the webhook endpoint orders
// (channels/webhooks/orders.yaml).
func hookAgent(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	hooks := filepath.Join(dir, "channels", "webhooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := "scheme: standard\nsecretEnv: HOOK_SECRET\nsession: \"hook:orders:{{.body.customer}}\"\nprompt: \"order {{.body.id}}\"\nkey: \"{{.body.id}}\"\n"
	if err := os.WriteFile(filepath.Join(hooks, "orders.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fastagent.yaml"), []byte("http: {invoke: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hookAgentInvokeOff is hookAgent without http: {invoke: true}: with a
// channel, its POST /invoke is off.
func hookAgentInvokeOff(t *testing.T) string {
	t.Helper()
	dir := hookAgent(t)
	if err := os.WriteFile(filepath.Join(dir, "fastagent.yaml"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// POST /invoke switched off (an agent with channels) is off at every
// route that runs a turn of that agent: /invoke, /agents/<its task
// queue>/invoke, and another agent's /agents/<name>/invoke when that
// agent's own definition switches it off; an agent that keeps it serves it.
func TestInvokeSwitchCoversEveryInvokeRoute(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string { return map[string]string{"HOOK_SECRET": hookSecret}[k] }
	p, err := Open(context.Background(), Config{Dir: hookAgentInvokeOff(t), TaskQueue: "orders", Getenv: getenv,
		Agents: map[string]string{"billing": hookAgentInvokeOff(t), "support": hookAgent(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	toks := &ingress.Tokens{}
	toks.AddToken("alice", "alice-token", ingress.RightInvoke)
	h, err := p.OpenHTTP(context.Background(), starterClient{st: &fakeStarter{}}, HTTPAuth{Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	post := func(path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer alice-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var refusal struct{ Error, Code string }
		_ = json.NewDecoder(resp.Body).Decode(&refusal)
		return resp.StatusCode, refusal.Code + " " + refusal.Error
	}
	for _, path := range []string{"/invoke", "/agents/orders/invoke", "/agents/billing/invoke"} {
		if code, body := post(path, `{"session":"s1","text":"hi"}`); code != http.StatusNotFound || !strings.Contains(body, "http: {invoke: true}") {
			t.Errorf("POST %s with /invoke switched off: %d %s, want 404 saying how to keep it", path, code, body)
		}
	}
	// support keeps POST /invoke: the route is there (a body without a
	// session is refused before any turn starts).
	if code, body := post("/agents/support/invoke", `{}`); code != http.StatusBadRequest {
		t.Errorf("POST /agents/support/invoke of an agent keeping /invoke: %d %s", code, body)
	}
}

// The ingress OpenHTTP builds, mounted under a prefix in a server of the
// caller's, serves the API routes, the channels' webhook endpoints (the
// main agent's and another agent's, by their signatures, not by the
// tokens) and /health there; the events route a webhook answer names
// starts with the prefix, and /agents/<name> for another agent.
func TestOpenHTTPMountedUnderAPrefix(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string { return map[string]string{"HOOK_SECRET": hookSecret}[k] }
	p, err := Open(context.Background(), Config{Dir: hookAgent(t), Getenv: getenv,
		Agents: map[string]string{"billing": hookAgent(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	st := &fakeStarter{}
	toks := &ingress.Tokens{}
	toks.AddToken("alice", "alice-token", ingress.RightInvoke)
	h, err := p.OpenHTTP(context.Background(), starterClient{st: st}, HTTPAuth{Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	mux := http.NewServeMux()
	mux.Handle("/agent/", http.StripPrefix("/agent", h))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	post := func(path, id string, signed bool) (int, webhook.Accepted) {
		t.Helper()
		body := []byte(`{"id":"` + id + `","customer":"c7"}`)
		req, _ := http.NewRequest(http.MethodPost, hs.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		secret := hookSecret
		if !signed {
			secret = "whsec_d3Jvbmcgc2VjcmV0IGZvciB0aGUgdGVzdA=="
		}
		sig, err := webhook.SignStandard([]string{secret}, "msg_"+id, time.Now(), body)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range sig {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var acc webhook.Accepted
		_ = json.NewDecoder(resp.Body).Decode(&acc)
		return resp.StatusCode, acc
	}
	if code, acc := post("/agent/hooks/orders", "o1", true); code != http.StatusAccepted ||
		acc.Events != "/agent/sessions/hook:orders:c7/turns/"+acc.Turn+"/events" {
		t.Errorf("the main agent's endpoint: %d %+v, want 202 with events under /agent/", code, acc)
	}
	if code, acc := post("/agent/agents/billing/hooks/orders", "o2", true); code != http.StatusAccepted ||
		acc.Events != "/agent/agents/billing/sessions/hook:orders:c7/turns/"+acc.Turn+"/events" {
		t.Errorf("another agent's endpoint: %d %+v, want 202 with events under /agent/agents/billing/", code, acc)
	}
	if code, _ := post("/agent/hooks/orders", "o3", false); code != http.StatusUnauthorized {
		t.Errorf("a badly signed webhook: %d, want 401", code)
	}
	if n := len(st.calls); n != 2 || !strings.Contains(st.calls[1], "billing/") {
		t.Errorf("hand-offs %q, want the two signed deliveries, the second to agent billing", st.calls)
	}
	// A session name of another agent is refused, naming that agent's
	// routes under the prefix.
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/agent/invoke", strings.NewReader(`{"session":"billing/s1","text":"hi"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer alice-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var refusal struct{ Error, Code string }
	_ = json.NewDecoder(resp.Body).Decode(&refusal)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(refusal.Error, "send them to /agent/agents/billing/") {
		t.Errorf("another agent's session at the main agent's routes: %d %+v", resp.StatusCode, refusal)
	}
	for path, want := range map[string]int{"/agent/health": 200, "/agent/sessions/s1": 401, "/agent/agents/billing/sessions/s1": 401} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
