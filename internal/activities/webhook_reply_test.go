package activities_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/webhook"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// A webhook event refused as busy and delivered again later, when the
// session takes it, gets its real answer: the busy callback is not stored
// as the turn's reply, so it never stands in for the answer.
func TestWebhookBusyCallbackDoesNotStandInForTheAnswer(t *testing.T) {
	t.Parallel()
	const secret = "whsec_ZTJlLWNhbGxiYWNrLXNpZ25pbmctc2VjcmV0"
	var mu sync.Mutex
	var got []webhook.Callback
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var cb webhook.Callback
		_ = json.Unmarshal(b, &cb)
		mu.Lock()
		got = append(got, cb)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	ch, err := webhook.New("orders", []byte("scheme: token\nsecretEnv: T\nreply:\n  url: "+recv.URL+"\n  secretEnv: R\n  allowPrivate: true\n"),
		func(k string) string { return map[string]string{"T": "tok", "R": secret}[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	now := time.Now()
	if err := st.Append(ctx, "hook:orders",
		transcript.Entry{ID: "u1", Type: transcript.TypeMessage, Time: now, Message: &transcript.Message{Role: transcript.RoleUser, Text: "event"}},
		transcript.Entry{ID: "a1", ParentID: "u1", Type: transcript.TypeMessage, Time: now, Message: &transcript.Message{Role: transcript.RoleAssistant, Text: "the real answer"}},
	); err != nil {
		t.Fatal(err)
	}
	r := activities.NewReplies(st, nil, []channels.Replier{ch.Replier}, nil)
	const key = "hook:orders:msg_1"
	data, _ := json.Marshal(wire.Target{Chat: "hook:orders", Message: key})
	target := wire.ReplyTarget{Kind: "hook:orders", Data: data}
	if err := r.Reply(ctx, wire.ReplyInput{Session: "hook:orders", Turn: key, Reply: target, Busy: true}); err != nil {
		t.Fatal(err)
	}
	out := agentloop.Outcome{Turn: key, Status: agent.TypeCompleted, First: "u1", Leaf: "a1"}
	if err := r.Reply(ctx, wire.ReplyInput{Session: "hook:orders", Turn: key, Reply: target, Outcome: out}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[1].Text != "the real answer" {
		t.Fatalf("callbacks %+v, want the busy notice, then the real answer", got)
	}
}

// A refusal's callback tells the receiver it failed, why (the refusal's
// details) and with which code.
func TestWebhookRefusalCallbackSaysWhy(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []webhook.Callback
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var cb webhook.Callback
		_ = json.Unmarshal(b, &cb)
		mu.Lock()
		got = append(got, cb)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	ch, err := webhook.New("orders", []byte("scheme: token\nsecretEnv: T\nreply:\n  url: "+recv.URL+"\n  secretEnv: R\n  allowPrivate: true\n"),
		func(k string) string {
			return map[string]string{"T": "tok", "R": "whsec_ZTJlLWNhbGxiYWNrLXNpZ25pbmctc2VjcmV0"}[k]
		})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	r := activities.NewReplies(st, nil, []channels.Replier{ch.Replier}, nil)
	const key = "hook:orders:msg_2"
	data, _ := json.Marshal(wire.Target{Chat: "hook:orders", Message: key})
	refusal := agentloop.Outcome{Turn: key, Status: agent.TypeFailed, Code: agent.CodeSessionBusy, Details: "session busy: 1000 turns are already waiting"}
	in := wire.ReplyInput{Session: "hook:orders", Turn: key, Reply: wire.ReplyTarget{Kind: "hook:orders", Data: data},
		Busy: true, Outcome: refusal, Ref: key + "@x"}
	for range 2 { // a retried activity posts once
		if err := r.Reply(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Status != agent.TypeFailed || got[0].Code != agent.CodeSessionBusy || got[0].Text != refusal.Details {
		t.Fatalf("callbacks %+v, want one saying failed, session_busy and why", got)
	}
}
