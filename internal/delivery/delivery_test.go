package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/tools"
)

func TestParseTarget(t *testing.T) {
	t.Parallel()
	good := map[string]delivery.Target{
		"slack:#ops":                 {Kind: "slack", Dest: "#ops"},
		"Slack:#Ops-Alerts":          {Kind: "slack", Dest: "#ops-alerts"},
		"slack:C0123ABCD":            {Kind: "slack", Dest: "C0123ABCD"},
		"slack:U0123ABCD":            {Kind: "slack", Dest: "U0123ABCD"},
		"feishu:oc_a1b2c3d4e5":       {Kind: "feishu", Dest: "oc_a1b2c3d4e5"},
		"lark:ou_a1b2c3d4e5":         {Kind: "lark", Dest: "ou_a1b2c3d4e5"},
		"telegram:-1001234567890":    {Kind: "telegram", Dest: "-1001234567890"},
		"telegram:42":                {Kind: "telegram", Dest: "42"},
		"telegram:@release_notes":    {Kind: "telegram", Dest: "@release_notes"},
		"github:octo-org/repo.go#12": {Kind: "github", Dest: "octo-org/repo.go#12"},
		"  slack:#ops  ":             {Kind: "slack", Dest: "#ops"},
	}
	for in, want := range good {
		got, err := delivery.ParseTarget(in)
		if err != nil || got != want {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                      "not a target",
		"ops":                   "not a target",
		"slack:":                "not a target",
		"email:a@b.c":           "unknown kind",
		"slack:ops":             "slack:#channel-name",
		"slack:#bad name":       "slack:#channel-name",
		"slack:c0123abcd":       "slack:#channel-name",
		"feishu:om_123456789":   "feishu:oc_",
		"telegram:12ab":         "telegram:<chat id>",
		"github:owner/repo":     "owner/repo#12",
		"github:owner/repo#0":   "owner/repo#12",
		"github:../etc#1":       "owner/repo#12",
		"github:owner/repo#1#2": "owner/repo#12",
	}
	for in, want := range bad {
		if _, err := delivery.ParseTarget(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTarget(%q) error = %v, want one saying %q", in, err, want)
		}
	}
	owner, repo, n, ok := delivery.GitHubIssue("octo-org/repo.go#12")
	if !ok || owner != "octo-org" || repo != "repo.go" || n != 12 {
		t.Errorf("GitHubIssue = %q %q %d %v", owner, repo, n, ok)
	}
}

func TestAllowList(t *testing.T) {
	t.Parallel()
	allow, err := delivery.ParseAllow([]string{"slack:#Ops", "Telegram:*", "github:o/r#1"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(allow, " ") != "slack:#ops telegram:* github:o/r#1" {
		t.Errorf("normalized = %v", allow)
	}
	cases := map[string]bool{
		"slack:#ops":        true,
		"slack:#OPS":        true,
		"slack:#ops2":       false,
		"slack:C0123ABCD":   false, // the same channel by ID is another target
		"telegram:-100123":  true,
		"telegram:@news_ch": true,
		"github:o/r#1":      true,
		"github:o/r#2":      false,
		"feishu:oc_abcdef1": false,
	}
	for in, want := range cases {
		tg, err := delivery.ParseTarget(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := delivery.Allowed(allow, tg); got != want {
			t.Errorf("Allowed(%s) = %v, want %v", in, got, want)
		}
	}
	for _, bad := range [][]string{{"*"}, {"email:*"}, {"slack:ops"}, {"slack:#ops", "nope"}} {
		if _, err := delivery.ParseAllow(bad); err == nil {
			t.Errorf("ParseAllow(%q) accepted", bad)
		}
	}
}

// refs is an in-memory reference store with the store's first-write-wins
// rule.
type refs struct {
	mu   sync.Mutex
	m    map[string]string
	fail error
}

func newRefs() *refs { return &refs{m: map[string]string{}} }

func (r *refs) SaveReply(_ context.Context, session, key, ref string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	if _, ok := r.m[session+"\x00"+key]; !ok {
		r.m[session+"\x00"+key] = ref
	}
	return nil
}

func (r *refs) Reply(_ context.Context, session, key string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, ok := r.m[session+"\x00"+key]
	if !ok {
		return "", store.ErrNotFound
	}
	return ref, nil
}

// sender records what it is asked to send; fail errors the next calls.
type sender struct {
	kind string
	mu   sync.Mutex
	reqs []delivery.Request
	fail []error
}

func (s *sender) Kind() string { return s.kind }

func (s *sender) Deliver(_ context.Context, req delivery.Request) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	if len(s.fail) > 0 {
		err := s.fail[0]
		s.fail = s.fail[1:]
		return "", err
	}
	return fmt.Sprintf("ref-%d", len(s.reqs)), nil
}

func (s *sender) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// TestDeliverOnce: a send kept under its key is not sent again; a failed
// send is sent again by the next call with the same key; another key is
// another send, with another mark.
func TestDeliverOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &sender{kind: "slack", fail: []error{errors.New("connection reset")}}
	senders := delivery.Senders{}
	senders.Add(s)
	rf := newRefs()
	tg, _ := delivery.ParseTarget("slack:#ops")
	if _, err := delivery.Deliver(ctx, senders, rf, tg, "sess", "k1", "hello", nil); err == nil || delivery.IsPermanent(err) {
		t.Fatalf("first attempt = %v, want a retryable failure", err)
	}
	ref, err := delivery.Deliver(ctx, senders, rf, tg, "sess", "k1", "hello", nil)
	if err != nil || ref != "ref-2" {
		t.Fatalf("retry = %q, %v", ref, err)
	}
	again, err := delivery.Deliver(ctx, senders, rf, tg, "sess", "k1", "hello", nil)
	if err != nil || again != "ref-2" || s.count() != 2 {
		t.Fatalf("third call = %q, %v after %d sends; want the kept reference and no send", again, err, s.count())
	}
	if _, err := delivery.Deliver(ctx, senders, rf, tg, "sess", "k2", "hello", nil); err != nil || s.count() != 3 {
		t.Fatalf("another key: %v, %d sends", err, s.count())
	}
	if s.reqs[0].Mark != s.reqs[1].Mark || s.reqs[1].Mark == s.reqs[2].Mark || s.reqs[0].Dest != "#ops" {
		t.Errorf("marks %q %q %q, dest %q", s.reqs[0].Mark, s.reqs[1].Mark, s.reqs[2].Mark, s.reqs[0].Dest)
	}
	if delivery.Mark("a", "b") == delivery.Mark("a\x00b", "") {
		t.Error("marks of different (session, key) collide")
	}
	tgm, _ := delivery.ParseTarget("telegram:42")
	if _, err := delivery.Deliver(ctx, senders, rf, tgm, "sess", "k3", "hi", nil); !delivery.IsPermanent(err) ||
		!strings.Contains(err.Error(), "no telegram channel is configured") {
		t.Errorf("unconfigured channel: %v", err)
	}
}

// workspace is a folder with a report, secrets and a symlink out of it.
func workspace(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"out/report.txt":         "all green\n",
		".env":                   "TOKEN=secret\n",
		".fastagent/sessions.db": "state",
		"empty.txt":              "",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".env", filepath.Join(dir, "innocent.txt")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func tool(t *testing.T, name string, allow ...string) agent.Tool {
	t.Helper()
	norm, err := delivery.ParseAllow(allow)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range delivery.Tools(norm, nil) {
		if tl.Spec().Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

func call(dir string, args map[string]string) agent.ToolCall {
	b, _ := json.Marshal(args)
	return agent.ToolCall{ID: "call_1", Args: b, Session: "sess", Dir: dir}
}

// TestToolsRefuse: a target not allowed, a bad target, a path outside the
// workspace or holding secrets, and a call outside a durable session are
// refused with a tool error the model reads; nothing is sent.
func TestToolsRefuse(t *testing.T) {
	t.Parallel()
	dir := workspace(t)
	s := &sender{kind: "slack"}
	env := delivery.Env{Senders: delivery.Senders{"slack": s}, Refs: newRefs(), Session: "sess", Key: "send/e1"}
	ctx := delivery.WithEnv(context.Background(), env)
	cases := []struct {
		name, tool string
		args       map[string]string
		ctx        context.Context
		want       string
	}{
		{"not allowed", delivery.SendMessageName, map[string]string{"to": "slack:#general", "text": "hi"}, ctx, "not an allowed target"},
		{"other kind", delivery.SendMessageName, map[string]string{"to": "telegram:42", "text": "hi"}, ctx, "not an allowed target"},
		{"bad target", delivery.SendMessageName, map[string]string{"to": "slack:ops", "text": "hi"}, ctx, "slack:#channel-name"},
		{"empty text", delivery.SendMessageName, map[string]string{"to": "slack:#ops", "text": "  "}, ctx, "text is empty"},
		{"no session", delivery.SendMessageName, map[string]string{"to": "slack:#ops", "text": "hi"}, context.Background(), "inside a durable session"},
		{".env", delivery.SendFileName, map[string]string{"to": "slack:#ops", "path": ".env"}, ctx, "not readable"},
		{"state dir", delivery.SendFileName, map[string]string{"to": "slack:#ops", "path": ".fastagent/sessions.db"}, ctx, "not readable"},
		{"symlink to .env", delivery.SendFileName, map[string]string{"to": "slack:#ops", "path": "innocent.txt"}, ctx, "not readable"},
		{"symlink out", delivery.SendFileName, map[string]string{"to": "slack:#ops", "path": "link.txt"}, ctx, "outside"},
		{"outside", delivery.SendFileName, map[string]string{"to": "slack:#ops", "path": "../x.txt"}, ctx, "outside"},
		{"empty file", delivery.SendFileName, map[string]string{"to": "slack:#ops", "path": "empty.txt"}, ctx, "is empty"},
		{"file not allowed", delivery.SendFileName, map[string]string{"to": "slack:#x", "path": "out/report.txt"}, ctx, "not an allowed target"},
	}
	for _, c := range cases {
		res, err := tool(t, c.tool, "slack:#ops").Run(c.ctx, call(dir, c.args))
		if err != nil || !res.IsError || !strings.Contains(res.Content, c.want) {
			t.Errorf("%s: result = %+v, %v; want a tool error saying %q", c.name, res, err, c.want)
		}
	}
	if n := s.count(); n != 0 {
		t.Errorf("%d sends, want none", n)
	}
}

// TestToolsSend: the tools send through the env's sender under the
// call's key, once however often the call is run; a failure a retry may
// fix is returned as an error the activity retries, one it cannot fix is a
// tool error.
func TestToolsSend(t *testing.T) {
	t.Parallel()
	dir := workspace(t)
	s := &sender{kind: "slack"}
	rf := newRefs()
	ctx := delivery.WithEnv(context.Background(), delivery.Env{Senders: delivery.Senders{"slack": s}, Refs: rf, Session: "sess", Key: "send/e1"})
	msg := tool(t, delivery.SendMessageName, "slack:*")
	if !msg.Spec().Idempotent {
		t.Error("send_message is not idempotent: a failed send would not be retried")
	}
	for range 2 {
		res, err := msg.Run(ctx, call(dir, map[string]string{"to": "slack:#ops", "text": "deploy done"}))
		if err != nil || res.IsError || !strings.Contains(res.Content, "slack:#ops") {
			t.Fatalf("send_message = %+v, %v", res, err)
		}
	}
	if s.count() != 1 || s.reqs[0].Text != "deploy done" || s.reqs[0].Key != "send/e1" || s.reqs[0].Session != "sess" {
		t.Fatalf("sends = %+v, want one", s.reqs)
	}

	fctx := delivery.WithEnv(context.Background(), delivery.Env{Senders: delivery.Senders{"slack": s}, Refs: rf, Session: "sess", Key: "send/e2"})
	res, err := tool(t, delivery.SendFileName, "slack:#ops").Run(fctx, call(dir, map[string]string{"to": "slack:#ops", "path": "out/report.txt"}))
	if err != nil || res.IsError {
		t.Fatalf("send_file = %+v, %v", res, err)
	}
	if got := s.reqs[1].File; got == nil || got.Name != "report.txt" || string(got.Data) != "all green\n" {
		t.Errorf("file sent = %+v", got)
	}

	s.fail = []error{errors.New("timeout"), delivery.Permanent(errors.New("channel_not_found"))}
	rctx := delivery.WithEnv(context.Background(), delivery.Env{Senders: delivery.Senders{"slack": s}, Refs: rf, Session: "sess", Key: "send/e3"})
	if _, err := msg.Run(rctx, call(dir, map[string]string{"to": "slack:#ops", "text": "x"})); !delivery.IsRetryable(err) {
		t.Errorf("a transient failure = %v, want a retryable error", err)
	}
	res, err = msg.Run(rctx, call(dir, map[string]string{"to": "slack:#ops", "text": "x"}))
	if err != nil || !res.IsError || !strings.Contains(res.Content, "channel_not_found") {
		t.Errorf("a permanent failure = %+v, %v; want a tool error", res, err)
	}
}

var _ tools.FileTool = delivery.Tools(nil, nil)[1].(tools.FileTool)
