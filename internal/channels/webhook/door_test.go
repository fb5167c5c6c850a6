package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/admission"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/internal/workspace"
	"github.com/fastagent/fastagent/workflows"
)

// starter records Signal-With-Start calls.
type starter struct {
	mu    sync.Mutex
	calls []wire.Delivery
	ids   []string
	err   error
}

func (s *starter) SignalWithStartWorkflow(_ context.Context, id, _ string, arg any, _ client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	s.calls = append(s.calls, arg.(wire.Delivery))
	s.ids = append(s.ids, id)
	return nil, nil
}

func (s *starter) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// serve serves endpoint name of yaml with the environment vars.
func serve(t *testing.T, name, yaml string, vars map[string]string) (*httptest.Server, *starter, *Door) {
	t.Helper()
	ch, err := New(name, []byte(yaml), env(vars))
	if err != nil {
		t.Fatal(err)
	}
	st := &starter{}
	d := ch.Door.(*Door)
	srv := httptest.NewServer(d.Handler(st, "q", nil, nil))
	t.Cleanup(srv.Close)
	return srv, st, d
}

func post(t *testing.T, url string, h http.Header, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

const stripeYAML = `scheme: hmac
secretEnv: STRIPE_WEBHOOK_SECRET
hmac:
  header: Stripe-Signature
  signatureKey: v1
  timestampKey: t
maxBodyBytes: 4096
when: body.type.startsWith("invoice.")
session: "hook:stripe:{{.body.data.object.customer}}"
key: "{{.body.id}}"
prompt: "Stripe {{.body.type}} for {{.body.data.object.customer}}: {{json .body.data.object}}"
`

// A Stripe-shaped event is verified and mapped; bad signature, stale
// timestamp, missing header and oversized body are 4xx and start nothing;
// a filtered event is 204 and starts nothing.
func TestStripeShapedEndpoint(t *testing.T) {
	const secret = "whsec_stripe_e2e"
	srv, st, _ := serve(t, "stripe", stripeYAML, map[string]string{"STRIPE_WEBHOOK_SECRET": secret})
	url := srv.URL
	body := []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"invoice.paid","data":{"object":{"customer":"cus_9","amount_paid":2000}}}`)
	sign := func(secret string, ts time.Time, b []byte) http.Header {
		return http.Header{"Stripe-Signature": {stripeHeader(secret, ts.Unix(), b)}, "Content-Type": {"application/json"}}
	}
	now := time.Now()
	refusals := []struct {
		name string
		h    http.Header
		body []byte
		want int
	}{
		{"bad signature", sign("whsec_wrong", now, body), body, http.StatusUnauthorized},
		{"stale timestamp", sign(secret, now.Add(-6*time.Minute), body), body, http.StatusUnauthorized},
		{"missing header", http.Header{}, body, http.StatusUnauthorized},
		{"oversized body", sign(secret, now, bytes.Repeat([]byte("x"), 5000)), bytes.Repeat([]byte("x"), 5000), http.StatusRequestEntityTooLarge},
	}
	for _, c := range refusals {
		if code, _ := post(t, url, c.h, c.body); code != c.want {
			t.Errorf("%s: status %d, want %d", c.name, code, c.want)
		}
	}
	if st.n() != 0 {
		t.Fatalf("refused requests started %d turns", st.n())
	}
	// Filtered out: 204, nothing started.
	other := []byte(`{"id":"evt_2","type":"customer.created","data":{"object":{"customer":"cus_9"}}}`)
	if code, _ := post(t, url, sign(secret, now, other), other); code != http.StatusNoContent {
		t.Errorf("filtered event: status %d, want 204", code)
	}
	if st.n() != 0 {
		t.Fatalf("a filtered event started a turn")
	}
	code, resp := post(t, url, sign(secret, now, body), body)
	if code != http.StatusAccepted {
		t.Fatalf("valid event: status %d %s", code, resp)
	}
	var acc Accepted
	if err := json.Unmarshal(resp, &acc); err != nil {
		t.Fatal(err)
	}
	wantKey := "hook:stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy"
	if acc.Turn != wantKey || acc.Session != "hook:stripe:cus_9" || acc.Events != "/sessions/hook:stripe:cus_9/turns/"+wantKey+"/events" {
		t.Errorf("answer %+v", acc)
	}
	if st.n() != 1 || st.ids[0] != workflows.WorkflowID("hook:stripe:cus_9") {
		t.Fatalf("calls %v", st.ids)
	}
	d := st.calls[0]
	if d.Key != wantKey || d.Source != "hook:stripe" || d.Reply != nil ||
		d.Prompt.Text != `Stripe invoice.paid for cus_9: {"amount_paid":2000,"customer":"cus_9"}` {
		t.Errorf("delivery %+v", d)
	}
	// Stripe re-signs a retry with a fresh timestamp: the same key.
	if code, resp := post(t, url, sign(secret, now.Add(time.Second), body), body); code != http.StatusAccepted || !bytes.Contains(resp, []byte(wantKey)) {
		t.Errorf("retry: %d %s", code, resp)
	}
}

const gitlabYAML = `scheme: token
secretEnv: GITLAB_WEBHOOK_TOKEN
token:
  header: X-Gitlab-Token
when: headers["x-gitlab-event"] == "Merge Request Hook" && body.object_attributes.action == "open"
session: "hook:gitlab:{{.body.project.id}}!{{.body.object_attributes.iid}}"
key: '{{header .headers "X-Gitlab-Event-UUID"}}'
prompt: "Review merge request {{.body.object_attributes.url}}: {{.body.object_attributes.title}}"
reply:
  url: https://ci.example.com/agent-answers
  secretEnv: GITLAB_REPLY_SECRET
`

// A GitLab-shaped event: X-Gitlab-Token, a filter on a header and the
// body, a key from the event UUID header, and a reply target.
func TestGitLabShapedEndpoint(t *testing.T) {
	srv, st, _ := serve(t, "gitlab", gitlabYAML, map[string]string{"GITLAB_WEBHOOK_TOKEN": "glt-secret", "GITLAB_REPLY_SECRET": specSecret})
	body := []byte(`{"object_kind":"merge_request","project":{"id":15,"path_with_namespace":"grp/app"},"object_attributes":{"iid":7,"action":"open","title":"Fix it","url":"https://gitlab.example.com/grp/app/-/merge_requests/7"}}`)
	h := func(tok, event string) http.Header {
		return http.Header{"X-Gitlab-Token": {tok}, "X-Gitlab-Event": {event}, "X-Gitlab-Event-Uuid": {"b6a4a1b3-0b0c-4d0e-9a6b-8c2a9d4c1e11"}}
	}
	if code, _ := post(t, srv.URL, h("wrong", "Merge Request Hook"), body); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", code)
	}
	if code, _ := post(t, srv.URL, http.Header{"X-Gitlab-Event": {"Merge Request Hook"}}, body); code != http.StatusUnauthorized {
		t.Errorf("missing token: %d", code)
	}
	if code, _ := post(t, srv.URL, h("glt-secret", "Push Hook"), body); code != http.StatusNoContent {
		t.Errorf("push hook: %d, want 204", code)
	}
	// A body the filter cannot read (no object_attributes) is filtered out.
	if code, _ := post(t, srv.URL, h("glt-secret", "Merge Request Hook"), []byte(`{"object_kind":"merge_request"}`)); code != http.StatusNoContent {
		t.Errorf("unreadable for the filter: %d, want 204", code)
	}
	if st.n() != 0 {
		t.Fatalf("%d turns started", st.n())
	}
	if code, resp := post(t, srv.URL, h("glt-secret", "Merge Request Hook"), body); code != http.StatusAccepted {
		t.Fatalf("valid: %d %s", code, resp)
	}
	d := st.calls[0]
	if st.ids[0] != workflows.WorkflowID("hook:gitlab:15!7") || d.Key != "hook:gitlab:b6a4a1b3-0b0c-4d0e-9a6b-8c2a9d4c1e11" ||
		d.Prompt.Text != "Review merge request https://gitlab.example.com/grp/app/-/merge_requests/7: Fix it" {
		t.Errorf("delivery %s %+v", st.ids[0], d)
	}
	var target wire.Target
	if d.Reply == nil || d.Reply.Kind != "hook:gitlab" || json.Unmarshal(d.Reply.Data, &target) != nil ||
		target.Chat != "hook:gitlab:15!7" || target.Message != d.Key {
		t.Errorf("reply target %+v", d.Reply)
	}
}

// Standard Webhooks defaults: key = webhook-id, session = hook:<name>, the
// prompt carries the event; Temporal unreachable answers 503.
func TestStandardDefaults(t *testing.T) {
	srv, st, _ := serve(t, "orders", "scheme: standard\nsecretEnv: ORDERS_SECRET\n", map[string]string{"ORDERS_SECRET": specSecret})
	body := []byte(`{"type":"order.created","id":42}`)
	h, _ := SignStandard([]string{specSecret}, "msg_abc", time.Now(), body)
	if code, resp := post(t, srv.URL, h, body); code != http.StatusAccepted {
		t.Fatalf("%d %s", code, resp)
	}
	d := st.calls[0]
	if st.ids[0] != workflows.WorkflowID("hook:orders") || d.Key != "hook:orders:msg_abc" || !strings.Contains(d.Prompt.Text, `"order.created"`) {
		t.Errorf("%s %+v", st.ids[0], d)
	}
	st.err = fmt.Errorf("unavailable")
	if code, _ := post(t, srv.URL, h, body); code != http.StatusServiceUnavailable {
		t.Errorf("hand-off failure: %d, want 503", code)
	}
	// Without a signed ID (token scheme), the key is the body's hash.
	srv2, st2, _ := serve(t, "alerts", "scheme: token\nsecretEnv: T\n", map[string]string{"T": "tok"})
	for range 2 {
		if code, _ := post(t, srv2.URL, http.Header{"Authorization": {"Bearer tok"}}, body); code != http.StatusAccepted {
			t.Fatal(code)
		}
	}
	if st2.n() != 2 || st2.calls[0].Key != st2.calls[1].Key || !strings.HasPrefix(st2.calls[0].Key, "hook:alerts:") || len(st2.calls[0].Key) != len("hook:alerts:")+64 {
		t.Errorf("keys %v", st2.calls)
	}
}

// Broken files stop with an error naming the file and the field; they are
// listed as channels/webhooks entries by Load.
func TestLoadErrors(t *testing.T) {
	vars := map[string]string{"S": specSecret, "T": "tok"}
	for yaml, want := range map[string]string{
		"secretEnv: S\n":                                                          "scheme: required",
		"scheme: none\nsecretEnv: S\n":                                            "scheme: \"none\"",
		"scheme: token\n":                                                         "secretEnv: required",
		"scheme: token\nsecretEnv: MISSING\n":                                     "environment variable MISSING is not set",
		"scheme: standard\nsecretEnv: T\n":                                        "secretEnv: T: a Standard Webhooks secret",
		"scheme: hmac\nsecretEnv: T\n":                                            "hmac: required",
		"scheme: hmac\nsecretEnv: T\nhmac: {}\n":                                  "hmac.header: required",
		"scheme: token\nsecretEnv: T\nwhen: 'body.'":                              "when:",
		"scheme: token\nsecretEnv: T\nwhen: '1 + 2'":                              "not a bool",
		"scheme: token\nsecretEnv: T\nsession: '{{'":                              "session:",
		"scheme: token\nsecretEnv: T\nrespond: sync":                              "respond:",
		"scheme: token\nsecretEnv: T\nwait: 10s":                                  "wait: only with respond: wait",
		"scheme: token\nsecretEnv: T\nrespond: wait\nwait: 5m":                    "wait:",
		"scheme: token\nsecretEnv: T\nreply: {url: 'ftp://x'}":                    "reply.url:",
		"scheme: token\nsecretEnv: T\nreply: {url: 'https://x/cb'}":               "reply.secretEnv: required",
		"scheme: token\nsecretEnv: T\nreply: {url: 'https://x/cb', secretEnv: T}": "reply.secretEnv: T:",
		"scheme: token\nsecretEnv: T\nbogus: 1":                                   "field bogus not found",
		"scheme: token\nsecretEnv: T\nmaxBodyBytes: 5000000":                      "maxBodyBytes:",
	} {
		dir := t.TempDir()
		wh := filepath.Join(dir, "channels", "webhooks")
		if err := os.MkdirAll(wh, 0o755); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(wh, "bad.yaml")
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := channels.Load(workspace.Workspace{Dir: dir}.Channels(), env(vars))
		if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %s and %q", yaml, err, file, want)
		}
	}
	// Two good files: two channels on their own routes; a bad name is refused.
	dir := t.TempDir()
	wh := filepath.Join(dir, "channels", "webhooks")
	_ = os.MkdirAll(wh, 0o755)
	_ = os.WriteFile(filepath.Join(wh, "a.yaml"), []byte("scheme: token\nsecretEnv: T\n"), 0o644)
	_ = os.WriteFile(filepath.Join(wh, "b.yml"), []byte("scheme: standard\nsecretEnv: S\n"), 0o644)
	_ = os.WriteFile(filepath.Join(wh, "c.yaml.disabled"), []byte("broken"), 0o644)
	chans, err := channels.Load(workspace.Workspace{Dir: dir}.Channels(), env(vars))
	if err != nil || len(chans) != 2 || chans[0].Door.Path() != "/hooks/a" || chans[1].Door.Kind() != "hook:b" ||
		chans[1].File != filepath.Join(wh, "b.yml") {
		t.Fatalf("%v %v", chans, err)
	}
	_ = os.WriteFile(filepath.Join(wh, "Bad Name.yaml"), []byte("scheme: token\nsecretEnv: T\n"), 0o644)
	if _, err := channels.Load(workspace.Workspace{Dir: dir}.Channels(), env(vars)); err == nil || !strings.Contains(err.Error(), "Bad Name") {
		t.Errorf("bad name: %v", err)
	}
}

// While the workers' backlog is over the admission limits, an endpoint
// answers 429 with Retry-After before accepting the event (nothing is
// handed to Temporal, so nothing is accepted and dropped); under them, 202.
func TestDoorRefusesBeforeAccepting(t *testing.T) {
	ch, err := New("orders", []byte("scheme: standard\nsecretEnv: S\n"), env(map[string]string{"S": specSecret}))
	if err != nil {
		t.Fatal(err)
	}
	var backlog atomic.Int64
	backlog.Store(500)
	lim := admission.New(admission.Limits{MaxBacklog: 50, RetryAfter: 3 * time.Second},
		func(context.Context) (admission.Backlog, error) { return admission.Backlog{Count: backlog.Load()}, nil }, nil)
	if err := lim.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := &starter{}
	d := ch.Door.(*Door)
	srv := httptest.NewServer(channels.Admitted(d.Kind(), d.Handler(st, "q", nil, nil), lim, nil))
	t.Cleanup(srv.Close)
	body := []byte(`{"type":"order.created"}`)
	h, _ := SignStandard([]string{specSecret}, "msg_1", time.Now(), body)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != http.StatusTooManyRequests || ra < 3 {
		t.Fatalf("over the backlog: %s, Retry-After %q; want 429 and at least 3", resp.Status, resp.Header.Get("Retry-After"))
	}
	if st.n() != 0 {
		t.Fatalf("a refused event was handed to Temporal")
	}
	backlog.Store(5)
	if err := lim.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _ := post(t, srv.URL, h, body); code != http.StatusAccepted || st.n() != 1 {
		t.Fatalf("under the backlog: %d, %d hand-offs; want 202 and 1", code, st.n())
	}
}
