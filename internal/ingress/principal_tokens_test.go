package ingress_test

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/turnusage"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// spendingSessions is a session client whose every turn uses 600 tokens,
// reported as the engine does (turnusage.Send) when the turn ends; a key
// answered again reports the same run (same First and Leaf).
type spendingSessions struct {
	*sessionsRecorder
}

func (s spendingSessions) outcome(key string) agentloop.Outcome {
	return agentloop.Outcome{Turn: key, Status: agent.TypeCompleted, First: "u-" + key, Leaf: "a-" + key,
		Usage: &agent.Usage{Input: 500, Output: 100}}
}

func (s spendingSessions) Invoke(ctx context.Context, scope agent.Scope, _ agent.Prompt) iter.Seq[agent.Event] {
	key := agent.IdempotencyKey(ctx)
	s.record("invoke " + scope.Session + " " + key)
	return func(yield func(agent.Event) bool) {
		out := s.outcome(key)
		turnusage.Send(ctx, nil, scope.Session, key, out)
		yield(out.Event())
	}
}

func (s spendingSessions) Attach(ctx context.Context, session, key string) (iter.Seq[agent.Event], error) {
	return func(yield func(agent.Event) bool) {
		out := s.outcome(key)
		turnusage.Send(ctx, nil, session, key, out)
		yield(out.Event())
	}, nil
}

// TestPrincipalTokensPerDay: limits.perPrincipal.tokensPerDay. Alice's
// turns are charged their usage when they end (a key answered again is
// not charged twice); once she used her day's tokens, a new invoke, a
// follow-up, a steer, an invoke with whileBusy steer, a manual compaction
// and a rewind (both call the model to summarize) are refused 429
// principal_limit with Retry-After until 00:00 UTC, before anything is
// started (the session client sees none of them); bob and an admin are
// not held back.
func TestPrincipalTokensPerDay(t *testing.T) {
	t.Parallel()
	rec := spendingSessions{&sessionsRecorder{recorder: &recorder{}}}
	s := &ingress.Server{Agent: rec, Control: rec, Attacher: rec, Sessions: rec, Principals: headerAuth{},
		PrincipalLimiter: ingress.NewPrincipalLimiter(ingress.PrincipalLimits{TokensPerDay: 1000, ExemptAdmins: true})}
	s.SetReady(true)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	user := func(name string, rights ...string) map[string]string {
		return map[string]string{"X-User": name, "X-Rights": strings.Join(append(rights, "invoke", "control"), ",")}
	}
	alice, bob, admin := user("tok-alice"), user("tok-bob"), user("tok-root", "admin")
	invoke := func(hdr map[string]string, session, key, extra string) (*http.Response, string) {
		t.Helper()
		h := map[string]string{}
		for k, v := range hdr {
			h[k] = v
		}
		if key != "" {
			h["Idempotency-Key"] = key
		}
		return do(t, hs, call{http.MethodPost, "/invoke", `{"session":"` + session + `","text":"hi"` + extra + `}`}, "", h)
	}

	if resp, body := invoke(alice, "tok-a", "k1", ""); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"completed"`) {
		t.Fatalf("alice's first turn: %d %s", resp.StatusCode, body)
	}
	// The same key answered again is the same run: not charged twice, so
	// alice (600 of 1000) may still start a turn.
	if resp, body := invoke(alice, "tok-a", "k1", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's key again: %d %s", resp.StatusCode, body)
	}
	if resp, body := invoke(alice, "tok-a", "k2", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's second turn (600 tokens used of 1000): %d %s", resp.StatusCode, body)
	}
	before := len(rec.took())

	// 1200 of 1000: refused until midnight UTC, nothing started.
	refused := []struct {
		name string
		c    call
		key  string
	}{
		{"invoke", call{http.MethodPost, "/invoke", `{"session":"tok-a","text":"more"}`}, "k3"},
		{"invoke while busy: steer", call{http.MethodPost, "/invoke", `{"session":"tok-a","text":"more","whileBusy":"steer"}`}, "k4"},
		{"follow-up", call{http.MethodPost, "/sessions/tok-a/followup", `{"text":"more"}`}, "k5"},
		{"steer", call{http.MethodPost, "/sessions/tok-a/steer", `{"text":"more"}`}, ""},
		{"compact", call{http.MethodPost, "/sessions/tok-a/compact", ``}, ""},
		{"rewind", call{http.MethodPost, "/sessions/tok-a/rewind", `{"entry":"u-k1"}`}, ""},
	}
	for _, r := range refused {
		h := map[string]string{"Idempotency-Key": r.key}
		for k, v := range alice {
			h[k] = v
		}
		now := time.Now().UTC()
		resp, body := do(t, hs, r.c, "", h)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("%s over the day's tokens: %d %s, want 429", r.name, resp.StatusCode, body)
			continue
		}
		var msg struct{ Error, Code string }
		if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.Code != ingress.CodePrincipalLimit ||
			!strings.Contains(msg.Error, "limits.perPrincipal.tokensPerDay") || !strings.Contains(msg.Error, "1200 tokens") {
			t.Errorf("%s: body %s, want code %q naming the limit and the tokens used", r.name, body, ingress.CodePrincipalLimit)
		}
		midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
		want := int(midnight.Sub(now).Seconds())
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < want-2 || ra > want+2 {
			t.Errorf("%s: Retry-After %q, want about %d (seconds to 00:00 UTC)", r.name, resp.Header.Get("Retry-After"), want)
		}
	}
	if got := rec.took()[before:]; len(got) != 0 {
		t.Errorf("refused requests reached the session client: %v", got)
	}
	// Others are not held back.
	if resp, body := invoke(bob, "tok-b", "b1", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("bob: %d %s", resp.StatusCode, body)
	}
	for i := range 3 {
		if resp, body := invoke(admin, "tok-r", "r"+strconv.Itoa(i), ""); resp.StatusCode != http.StatusOK {
			t.Errorf("an exempt admin's turn %d: %d %s", i, resp.StatusCode, body)
		}
	}
}

// The limiter charges each turn run once, counts per UTC day and refuses
// until the next midnight.
func TestPrincipalLimiterTokens(t *testing.T) {
	t.Parallel()
	l := ingress.NewPrincipalLimiter(ingress.PrincipalLimits{TokensPerDay: 100})
	r := turnusage.Report{Session: "s", Turn: "k", First: "u1", Leaf: "a1", Usage: agent.Usage{Input: 60, Output: 50}}
	if err := l.CheckTokens("lt-p", false); err != nil {
		t.Fatal(err)
	}
	l.Charge("lt-p", false, r)
	l.Charge("lt-p", false, r) // the same run answered again
	if err := l.CheckTokens("lt-other", false); err != nil {
		t.Errorf("another principal: %v", err)
	}
	if err := l.CheckTokens("lt-p", false); err == nil || !strings.Contains(err.Error(), "used 110 tokens") {
		t.Errorf("after 110 of 100 tokens: %v, want a refusal counting 110 (charged once)", err)
	}
	if _, err := l.Take("lt-p", false); err == nil {
		t.Error("Take admitted a turn over the day's tokens")
	}
	// The same key run anew (another First/Leaf) is charged.
	l2 := ingress.NewPrincipalLimiter(ingress.PrincipalLimits{TokensPerDay: 200})
	l2.Charge("lt-q", false, r)
	r.First, r.Leaf = "u2", "a2"
	l2.Charge("lt-q", false, r)
	if err := l2.CheckTokens("lt-q", false); err == nil {
		t.Error("a key run again as a new turn was not charged")
	}
}

// In the web chat (a principal signed in by a link) a message past the
// principal's day's tokens is refused with the same 429 principal_limit,
// whose message — what the page shows the sender — says why and until
// when; nothing is started.
func TestPrincipalTokensPerDayInWebChat(t *testing.T) {
	t.Parallel()
	var rec spendingSessions
	hs, _ := authServer(t, func(s *ingress.Server) {
		g := ingress.NewChatGate()
		s.Chat = g
		rec = spendingSessions{&sessionsRecorder{recorder: s.Agent.(*recorder)}}
		s.Agent, s.Attacher = rec, rec
		s.PrincipalLimiter = ingress.NewPrincipalLimiter(ingress.PrincipalLimits{TokensPerDay: 500, ExemptAdmins: true})
	})
	sess, csrf := signIn(t, hs, aliceTok)
	hdr := map[string]string{ingress.ChatCSRFHeader: csrf, "Origin": hs.URL}
	if r, b := withCookie(t, hs, call{http.MethodPost, "/invoke", `{"session":"chat-tok","text":"hi"}`}, sess, hdr); r.StatusCode != http.StatusOK {
		t.Fatalf("the first chat message: %d %s", r.StatusCode, b)
	}
	before := len(rec.took())
	r, b := withCookie(t, hs, call{http.MethodPost, "/invoke", `{"session":"chat-tok","text":"again"}`}, sess, hdr)
	var msg struct{ Error, Code string }
	if r.StatusCode != http.StatusTooManyRequests || json.Unmarshal([]byte(b), &msg) != nil || msg.Code != ingress.CodePrincipalLimit ||
		!strings.Contains(msg.Error, "used 600 tokens today (UTC)") || !strings.Contains(msg.Error, "until 00:00 UTC (in ") {
		t.Fatalf("a chat message past the day's tokens: %d %s, want 429 principal_limit saying why and until when", r.StatusCode, b)
	}
	if got := rec.took()[before:]; len(got) != 0 {
		t.Errorf("the refused chat message reached the session client: %v", got)
	}
}

// summarizingSessions is spendingSessions whose manual compactions and
// rewinds report their summary call's usage (600 and 500 tokens).
type summarizingSessions struct {
	spendingSessions
}

func (s summarizingSessions) Compact(ctx context.Context, session string) (workflows.CompactResult, error) {
	res, err := s.spendingSessions.Compact(ctx, session)
	res.Usage = &agent.Usage{Input: 550, Output: 50, Calls: 1}
	return res, err
}

func (s summarizingSessions) Rewind(ctx context.Context, session, entry string) (workflows.RewindResult, error) {
	res, err := s.spendingSessions.Rewind(ctx, session, entry)
	res.SummaryEntry = "bs-" + entry
	res.Usage = &agent.Usage{Input: 450, Output: 50, Calls: 1}
	return res, err
}

// A manual compaction and a rewind call the model to summarize: their
// summary's tokens are charged to the caller's principal, whose next
// compaction is then refused (429 principal_limit, Retry-After) without
// reaching the session.
func TestPrincipalTokensChargeSummaries(t *testing.T) {
	t.Parallel()
	rec := summarizingSessions{spendingSessions{&sessionsRecorder{recorder: &recorder{}}}}
	s := &ingress.Server{Agent: rec, Control: rec, Attacher: rec, Sessions: rec, Principals: headerAuth{},
		PrincipalLimiter: ingress.NewPrincipalLimiter(ingress.PrincipalLimits{TokensPerDay: 1600})}
	s.SetReady(true)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	alice := map[string]string{"X-User": "sum-alice", "X-Rights": "invoke,control"}
	if resp, body := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"sum-a","text":"hi"}`}, "", alice); resp.StatusCode != http.StatusOK {
		t.Fatalf("the turn that starts the session: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, hs, call{http.MethodPost, "/sessions/sum-a/compact", ``}, "", alice); resp.StatusCode != http.StatusOK {
		t.Fatalf("compact: %d %s", resp.StatusCode, body)
	}
	if err := s.PrincipalLimiter.CheckTokens("sum-alice", false); err != nil {
		t.Fatalf("after a turn and a compaction (1200 of 1600): %v", err)
	}
	if resp, body := do(t, hs, call{http.MethodPost, "/sessions/sum-a/rewind", `{"entry":"e1"}`}, "", alice); resp.StatusCode != http.StatusOK {
		t.Fatalf("rewind: %d %s", resp.StatusCode, body)
	}
	before := len(rec.took())
	resp, body := do(t, hs, call{http.MethodPost, "/sessions/sum-a/compact", ``}, "", alice)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, ingress.CodePrincipalLimit) ||
		!strings.Contains(body, "1700 tokens") || resp.Header.Get("Retry-After") == "" {
		t.Errorf("compact past the day's tokens: %d %s (Retry-After %q), want 429 principal_limit counting 1700 tokens (the turn, the compaction and the rewind)",
			resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if got := rec.took()[before:]; len(got) != 0 {
		t.Errorf("the refused compaction reached the session client: %v", got)
	}
}

// slowSummaries is summarizingSessions whose compactions wait for gate
// (entered says one started) and fail when their context ends first.
type slowSummaries struct {
	summarizingSessions
	entered chan struct{}
	gate    chan struct{}
}

func (s slowSummaries) Compact(ctx context.Context, session string) (workflows.CompactResult, error) {
	s.entered <- struct{}{}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return workflows.CompactResult{}, ctx.Err()
	}
	return s.summarizingSessions.Compact(ctx, session)
}

// A client that leaves while its manual compaction runs does not make the
// summary free: the ingress waits for it and charges it.
func TestPrincipalTokensSummaryChargedAfterDisconnect(t *testing.T) {
	t.Parallel()
	rec := slowSummaries{summarizingSessions{spendingSessions{&sessionsRecorder{recorder: &recorder{}}}},
		make(chan struct{}, 1), make(chan struct{})}
	s := &ingress.Server{Agent: rec, Control: rec, Attacher: rec, Sessions: rec, Principals: headerAuth{},
		PrincipalLimiter: ingress.NewPrincipalLimiter(ingress.PrincipalLimits{TokensPerDay: 1000})}
	s.SetReady(true)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	leaver := map[string]string{"X-User": "sum-leaver", "X-Rights": "invoke,control"}
	if resp, body := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"gone","text":"hi"}`}, "", leaver); resp.StatusCode != http.StatusOK {
		t.Fatalf("the turn that starts the session: %d %s", resp.StatusCode, body)
	}
	if err := s.PrincipalLimiter.CheckTokens("sum-leaver", false); err != nil {
		t.Fatalf("after one turn (600 of 1000): %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/sessions/gone/compact", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-User", "sum-leaver")
	req.Header.Set("X-Rights", "invoke,control")
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-rec.entered:
	case err := <-done:
		t.Fatalf("the compaction never reached the session: %v", err)
	}
	cancel() // the client leaves while the summary runs
	if err := <-done; err == nil {
		t.Fatal("the request finished although its client left")
	}
	close(rec.gate)
	deadline := time.Now().Add(10 * time.Second)
	for s.PrincipalLimiter.CheckTokens("sum-leaver", false) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the compaction whose client left was never charged")
		}
		time.Sleep(10 * time.Millisecond) // polls the condition, bounded by the deadline
	}
}
