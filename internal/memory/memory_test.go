package memory_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/memory"
	"github.com/fastagent/fastagent/internal/store"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func run(t *testing.T, tools []agent.Tool, ctx context.Context, name string, args any) agent.ToolResult {
	t.Helper()
	for _, tl := range tools {
		if tl.Spec().Name == name {
			raw, _ := json.Marshal(args)
			res, err := tl.Run(ctx, agent.ToolCall{ID: "c", Name: name, Args: raw})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return res
		}
	}
	t.Fatalf("no tool %s", name)
	return agent.ToolResult{}
}

// A remember retried with the same call key stores one memory; the worker's
// secret values are redacted; another principal's session recalls nothing.
func TestRememberRetriedStoresOnce(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	for s, p := range map[string]string{"alice-1": "alice", "bob-1": "bob"} {
		if _, err := st.ClaimSession(ctx, s, p); err != nil {
			t.Fatal(err)
		}
	}
	tools := memory.Tools(memory.ScopePrincipal)
	env := memory.Env{Store: st, Agent: "a", Session: "alice-1", Key: "alice-1/e-3", Environ: []string{"X_API_KEY=sk-secret-value-1"}}
	in := memory.WithEnv(ctx, env)
	first := run(t, tools, in, memory.RememberName, map[string]any{"text": "deploys run on fridays, key sk-secret-value-1"})
	again := run(t, tools, in, memory.RememberName, map[string]any{"text": "deploys run on fridays, key sk-secret-value-1"})
	if first.IsError || first.Content != again.Content || !strings.Contains(first.Content, "[redacted]") {
		t.Fatalf("remember twice: %q, %q", first.Content, again.Content)
	}
	all, err := st.Recall(ctx, store.MemoryQuery{MemoryScope: store.MemoryScope{All: true}, Limit: 10})
	if err != nil || len(all) != 1 || strings.Contains(all[0].Text, "sk-secret") || all[0].Owner != "alice" {
		t.Fatalf("stored %+v, %v; want one redacted memory of alice", all, err)
	}
	if got := run(t, tools, in, memory.RecallName, map[string]any{"query": "when do deploys run"}); !strings.Contains(got.Content, "fridays") {
		t.Fatalf("alice recalls %q", got.Content)
	}
	bob := memory.WithEnv(ctx, memory.Env{Store: st, Agent: "a", Session: "bob-1", Key: "bob-1/e-3"})
	if got := run(t, tools, bob, memory.RecallName, map[string]any{"query": "deploys fridays"}); got.Content != "No memories match." {
		t.Fatalf("bob recalls %q", got.Content)
	}
	if got := run(t, tools, bob, memory.ForgetName, map[string]any{"id": all[0].ID}); !got.IsError {
		t.Fatalf("bob forgot alice's memory: %q", got.Content)
	}
	// A delegated sub-agent session acts for its delegating session's owner.
	sub := memory.WithEnv(ctx, memory.Env{Store: st, Agent: "a", Session: "alice-1/delegate-0123456789abcdef", Key: "k"})
	if got := run(t, tools, sub, memory.RecallName, map[string]any{"query": "deploys"}); !strings.Contains(got.Content, "fridays") {
		t.Fatalf("alice's sub-agent recalls %q", got.Content)
	}
	// Without an owner there is nobody to remember for; outside a session, no memory.
	nobody := memory.WithEnv(ctx, memory.Env{Store: st, Agent: "a", Session: "slack:T1:C1", Key: "k2"})
	if got := run(t, tools, nobody, memory.RememberName, map[string]any{"text": "x"}); !got.IsError {
		t.Fatalf("remember in a session without owner: %q", got.Content)
	}
	if got := run(t, tools, ctx, memory.RememberName, map[string]any{"text": "x"}); !got.IsError {
		t.Fatalf("remember outside a session: %q", got.Content)
	}
	if got := run(t, memory.Tools(memory.ScopeShared), nobody, memory.RememberName, map[string]any{"text": "the office closes at six"}); got.IsError || !strings.Contains(got.Content, "team") {
		t.Fatalf("shared remember: %q", got.Content)
	}
	if got := run(t, tools, bob, memory.RecallName, map[string]any{"query": "office"}); !strings.Contains(got.Content, "six") || !strings.Contains(got.Content, "shared") {
		t.Fatalf("bob recalls the shared memory: %q", got.Content)
	}
}

// Inject stays within its token bound and leaves out other principals.
func TestInjectBounded(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	if _, err := st.ClaimSession(ctx, "s", "alice"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := st.Remember(ctx, store.Memory{Agent: "a", Owner: "alice", Text: "tea fact " + strings.Repeat("x", 100)}, "k"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	block, err := memory.Inject(ctx, st, "a", "s", "tea", 10, 100)
	if err != nil || block == "" || len(block) > 100*4+64 {
		t.Fatalf("inject = %d bytes, %v", len(block), err)
	}
	if block, _ := memory.Inject(ctx, st, "a", "other", "tea", 10, 400); block != "" {
		t.Fatalf("a session of nobody gets %q", block)
	}
}

// A worker secret is redacted from a memory in its common encodings too:
// base64 (standard and URL-safe, alone or inside a longer encoded string
// such as a basic-auth header), hex and URL escaping.
func TestRememberRedactsEncodedSecrets(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	if _, err := st.ClaimSession(ctx, "alice-1", "alice"); err != nil {
		t.Fatal(err)
	}
	const secret = "sk-live/4f9+Qz?x&y=1~"
	encodings := map[string]string{
		"base64":      base64.StdEncoding.EncodeToString([]byte(secret)),
		"base64url":   base64.RawURLEncoding.EncodeToString([]byte(secret)),
		"basic auth":  base64.StdEncoding.EncodeToString([]byte("alice:" + secret)),
		"basic auth2": base64.StdEncoding.EncodeToString([]byte("al:" + secret + "!")),
		"hex":         hex.EncodeToString([]byte(secret)),
		"HEX":         strings.ToUpper(hex.EncodeToString([]byte(secret))),
		"query":       url.QueryEscape(secret),
		"path":        url.PathEscape(secret),
	}
	tools := memory.Tools(memory.ScopePrincipal)
	i := 0
	for name, enc := range encodings {
		i++
		key := "alice-1/e-" + string(rune('a'+i))
		in := memory.WithEnv(ctx, memory.Env{Store: st, Agent: "a", Session: "alice-1", Key: key, Environ: []string{"SHOP_API_KEY=" + secret}})
		res := run(t, tools, in, memory.RememberName, map[string]any{"text": "the header is " + enc + " today", "tags": []string{enc[:min(len(enc), 60)]}})
		if res.IsError || !strings.Contains(res.Content, "[redacted]") {
			t.Errorf("%s: remember answered %q, want it to say it redacted", name, res.Content)
		}
	}
	all, err := st.Recall(ctx, store.MemoryQuery{MemoryScope: store.MemoryScope{All: true}, Limit: 20})
	if err != nil || len(all) != len(encodings) {
		t.Fatalf("stored %d memories, %v", len(all), err)
	}
	for _, m := range all {
		stored := m.Text + " " + strings.Join(m.Tags, " ")
		for name, enc := range encodings {
			// What is left of an encoding must not hold a run of it long
			// enough to carry the secret (a few boundary characters stay).
			for _, part := range strings.Split(stored, "[redacted]") {
				if len(enc) >= 12 && strings.Contains(part, enc[4:len(enc)-4]) {
					t.Errorf("%s of the secret survives in %q", name, stored)
				}
			}
		}
	}
}
