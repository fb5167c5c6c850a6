package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/transcript"
)

// branchModel answers "answer: <prompt>", a summary request with a fixed
// branch summary, and holds the reply to "slow" until released.
type branchModel struct {
	mu      sync.Mutex
	release chan struct{}
	slowAt  chan struct{}
	slowed  sync.Once
	reqs    []modelserver.Request
}

const triedSummary = "BRANCH-SUMMARY: the user tried the second and third ideas"

func (m *branchModel) handle(req modelserver.Request) modelserver.Reply {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	if len(req.Messages) > 0 && strings.Contains(req.Messages[0].Content, "context summarization assistant") {
		return modelserver.Reply{Text: []string{triedSummary}}
	}
	last := req.LastUserText()
	if last == "slow" {
		m.slowed.Do(func() { close(m.slowAt) })
		return modelserver.Reply{Text: []string{"slow done"}, Hold: m.release}
	}
	return modelserver.Reply{Text: []string{"answer: " + last}}
}

// lastTurnRequest is the newest request that was not a summary.
func (m *branchModel) lastTurnRequest(t *testing.T) modelserver.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.reqs) - 1; i >= 0; i-- {
		if r := m.reqs[i]; !strings.Contains(r.Messages[0].Content, "context summarization assistant") {
			return r
		}
	}
	t.Fatal("no turn request")
	return modelserver.Request{}
}

func texts(req modelserver.Request) string {
	var out []string
	for _, m := range req.Messages {
		if m.Role != "system" {
			out = append(out, m.Role+":"+m.Content)
		}
	}
	return strings.Join(out, " | ")
}

type transcriptBody struct {
	Leaf    string             `json:"leaf"`
	Entries []transcript.Entry `json:"entries"`
}

// TestReadingAndMovingSessions: list (own sessions, pages), transcript
// (branch and tree), export → import round trip, a golden pi file imports
// and runs, fork from an entry, rewind with a branch summary the next turn
// sees, follow-ups queued behind a running turn (re-attachable, bounded),
// and the refusals: bad import lines, unknown entries, rewind mid-turn.
func TestReadingAndMovingSessions(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	model := &branchModel{release: make(chan struct{}), slowAt: make(chan struct{})}
	e.kit.Model.Handle(model.handle)
	e.startWorker()
	hs := e.authIngress(nil)
	u := hs.URL
	req := func(method, path, tok, body string) (int, string) {
		t.Helper()
		st, b, _ := send(t, method, u+path, tok, body, nil)
		return st, b
	}
	invoke := func(tok, body string) string {
		t.Helper()
		st, b := req(http.MethodPost, "/invoke", tok, body)
		if st != http.StatusOK || !strings.Contains(b, `"type":"completed"`) {
			t.Fatalf("invoke %s: %d %s", body, st, b)
		}
		return b
	}
	readTranscript := func(session, q string) transcriptBody {
		t.Helper()
		st, b := req(http.MethodGet, "/sessions/"+session+"/transcript"+q, "alice-token", "")
		if st != http.StatusOK {
			t.Fatalf("transcript %s: %d %s", session, st, b)
		}
		var v transcriptBody
		if err := json.Unmarshal([]byte(b), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, p := range []string{"first", "second", "third"} {
		invoke("alice-token", `{"session":"orig","text":"`+p+`"}`)
	}
	invoke("bob-token", `{"session":"bobs","text":"hello"}`)

	// The list: alice sees hers, in pages; bob his; an admin both.
	t.Run("list", func(t *testing.T) {
		var v struct {
			Sessions   []ingress.SessionListItem `json:"sessions"`
			NextCursor string                    `json:"nextCursor"`
		}
		// The last turn's record is written just after its answer.
		wait.Until(10*time.Second, func() bool { // the check below says what is wrong
			st, b := req(http.MethodGet, "/sessions", "alice-token", "")
			if err := json.Unmarshal([]byte(b), &v); st != 200 || err != nil || len(v.Sessions) != 1 {
				t.Fatalf("alice's list: %d %s", st, b)
			}
			return v.Sessions[0].Turns == 3
		})
		if s := v.Sessions[0]; s.Session != "orig" || s.Owner != "alice" || s.Turns != 3 || s.Entries != 6 || s.Status != "open" || time.Since(s.Updated) > time.Minute {
			t.Errorf("alice's session: %+v", s)
		}
		_, b := req(http.MethodGet, "/sessions?limit=1", "admin-token", "")
		if err := json.Unmarshal([]byte(b), &v); err != nil || len(v.Sessions) != 1 || v.Sessions[0].Session != "bobs" || v.NextCursor == "" {
			t.Fatalf("admin page 1: %s", b)
		}
		_, b = req(http.MethodGet, "/sessions?limit=1&cursor="+v.NextCursor, "admin-token", "")
		if err := json.Unmarshal([]byte(b), &v); err != nil || len(v.Sessions) != 1 || v.Sessions[0].Session != "orig" {
			t.Fatalf("admin page 2: %s", b)
		}
		if st, b := req(http.MethodGet, "/sessions?cursor=zz!", "admin-token", ""); st != 400 {
			t.Errorf("bad cursor: %d %s", st, b)
		}
		if st, _ := req(http.MethodGet, "/sessions", "", ""); st != 401 {
			t.Errorf("no token: %d", st)
		}
	})

	orig := readTranscript("orig", "")
	t.Run("transcript", func(t *testing.T) {
		if len(orig.Entries) != 6 || orig.Entries[5].ID != orig.Leaf || orig.Entries[4].Message.Text != "third" {
			t.Fatalf("branch: %+v", orig)
		}
		if tree := readTranscript("orig", "?tree=1"); len(tree.Entries) != 6 {
			t.Errorf("tree: %d entries", len(tree.Entries))
		}
		if st, b := req(http.MethodGet, "/sessions/orig/transcript", "bob-token", ""); st != 404 {
			t.Errorf("bob reads alice's transcript: %d %s", st, b)
		}
	})

	t.Run("export import", func(t *testing.T) {
		st, b, h := send(t, http.MethodGet, u+"/sessions/orig/export", "alice-token", "", nil)
		if st != 200 || h.Get("Content-Type") != "application/x-ndjson" || !strings.HasPrefix(b, `{"type":"session","version":3,"id":"orig"`) {
			t.Fatalf("export: %d %q %s", st, h.Get("Content-Type"), b)
		}
		body, _ := json.Marshal(ingress.ImportRequest{Session: "copy", JSONL: b})
		if st, b := req(http.MethodPost, "/sessions/import", "alice-token", string(body)); st != http.StatusCreated {
			t.Fatalf("import: %d %s", st, b)
		}
		cp := readTranscript("copy", "")
		if g, w := mustJSON(t, cp.Entries), mustJSON(t, orig.Entries); g != w || cp.Leaf != orig.Leaf {
			t.Errorf("imported transcript differs:\n got %s\nwant %s", g, w)
		}
		if st, b := req(http.MethodPost, "/sessions/import", "alice-token", string(body)); st != http.StatusConflict {
			t.Errorf("import over an existing session: %d %s", st, b)
		}
		invoke("alice-token", `{"session":"copy","text":"fourth"}`)
		if got := texts(model.lastTurnRequest(t)); !strings.Contains(got, "user:first") || !strings.Contains(got, "assistant:answer: third") {
			t.Errorf("the imported session's turn did not see its history: %s", got)
		}
	})

	t.Run("golden pi file", func(t *testing.T) {
		raw, err := os.ReadFile("../pisession/testdata/pi-session.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(ingress.ImportRequest{JSONL: string(raw)})
		if st, b := req(http.MethodPost, "/sessions/import", "alice-token", string(body)); st != http.StatusCreated || !strings.Contains(b, `"session":"0b6f3c1e-4a52-4d8e-9c1f-2f1a7d3e5b90"`) {
			t.Fatalf("import pi file: %d %s", st, b)
		}
		invoke("alice-token", `{"session":"0b6f3c1e-4a52-4d8e-9c1f-2f1a7d3e5b90","text":"continue"}`)
		got := texts(model.lastTurnRequest(t))
		for _, want := range []string{"Understand main.go", "Tried renaming main", "user:And now?", "user:continue"} {
			if !strings.Contains(got, want) {
				t.Errorf("pi session's context lacks %q: %s", want, got)
			}
		}
	})

	t.Run("bad import", func(t *testing.T) {
		body, _ := json.Marshal(ingress.ImportRequest{Session: "broken", JSONL: `{"type":"session","version":3,"id":"b"}` + "\n" +
			`{"type":"message","id":"u1","parentId":null,"message":{"role":"user","content":"x"}}` + "\n" + `{"type":"message","id":"u2","parentId":"missing","message":{"role":"user","content":"y"}}`})
		st, b := req(http.MethodPost, "/sessions/import", "alice-token", string(body))
		if st != 400 || !strings.Contains(b, `"line":3`) {
			t.Errorf("bad import: %d %s", st, b)
		}
		if leaf, err := e.kit.Store.Leaf(context.Background(), "broken"); err != nil || leaf != "" || e.sessionExists("broken") {
			t.Errorf("a refused import created something: leaf %q, %v", leaf, err)
		}
	})

	t.Run("fork from entry", func(t *testing.T) {
		at := orig.Entries[1].ID // the answer to "first"
		invoke("alice-token", `{"session":"fork","text":"branching","parentSession":"orig","fromEntry":"`+at+`"}`)
		got := texts(model.lastTurnRequest(t))
		if !strings.Contains(got, "user:first | assistant:answer: first | user:branching") || strings.Contains(got, "second") {
			t.Errorf("fork context: %s", got)
		}
		st, b := req(http.MethodPost, "/invoke", "alice-token", `{"session":"fork2","text":"x","parentSession":"orig","fromEntry":"nope"}`)
		if st != 404 || !strings.Contains(b, "no entry") || e.sessionExists("fork2") {
			t.Errorf("fork from an unknown entry: %d %s", st, b)
		}
	})

	t.Run("rewind", func(t *testing.T) {
		at := orig.Entries[1].ID
		if st, b := req(http.MethodPost, "/sessions/orig/rewind", "alice-token", `{"entry":"nope"}`); st != 404 {
			t.Errorf("rewind to an unknown entry: %d %s", st, b)
		}
		if st, _ := req(http.MethodPost, "/sessions/orig/rewind", "", `{"entry":"`+at+`"}`); st != 401 {
			t.Errorf("rewind without a token: %d", st)
		}
		st, b := req(http.MethodPost, "/sessions/orig/rewind", "alice-token", `{"entry":"`+at+`"}`)
		if st != 200 || !strings.Contains(b, `"abandoned":4`) || !strings.Contains(b, triedSummary) {
			t.Fatalf("rewind: %d %s", st, b)
		}
		tr := readTranscript("orig", "")
		if len(tr.Entries) != 3 || tr.Entries[2].Type != transcript.TypeBranchSummary || tr.Entries[2].BranchSummary.FromID != orig.Leaf {
			t.Fatalf("after rewind: %s", mustJSON(t, tr))
		}
		invoke("alice-token", `{"session":"orig","text":"try again"}`)
		got := texts(model.lastTurnRequest(t))
		if !strings.Contains(got, triedSummary) || strings.Contains(got, "user:second") || !strings.Contains(got, "user:try again") {
			t.Errorf("the turn after a rewind: %s", got)
		}
	})

	t.Run("follow-ups and a rewind mid-turn", func(t *testing.T) {
		done := make(chan string, 1)
		go func() {
			_, b, _ := send(t, http.MethodPost, u+"/invoke", "alice-token", `{"session":"orig","text":"slow"}`, nil)
			done <- b
		}()
		select {
		case <-model.slowAt:
		case <-time.After(time.Minute):
			t.Fatal("the slow turn never reached the model")
		}
		if st, b := req(http.MethodPost, "/sessions/orig/rewind", "alice-token", `{"entry":"`+orig.Entries[1].ID+`"}`); st != http.StatusConflict || !strings.Contains(b, agent.CodeTurnRunning) {
			t.Errorf("rewind during a turn: %d %s", st, b)
		}
		var keys []string
		for i := 0; ; i++ {
			st, b := req(http.MethodPost, "/sessions/orig/followup", "alice-token", fmt.Sprintf(`{"text":"follow %d"}`, i))
			if st == http.StatusTooManyRequests {
				if i != 8 || !strings.Contains(b, "waiting") {
					t.Errorf("follow-up %d refused: %s", i, b)
				}
				break
			}
			var v struct{ Turn string }
			if st != http.StatusAccepted || json.Unmarshal([]byte(b), &v) != nil || v.Turn == "" {
				t.Fatalf("follow-up %d: %d %s", i, st, b)
			}
			keys = append(keys, v.Turn)
			if i > 10 {
				t.Fatal("follow-ups are not bounded")
			}
		}
		close(model.release)
		if b := <-done; !strings.Contains(b, `"type":"completed"`) {
			t.Errorf("slow turn: %s", b)
		}
		// Every follow-up runs, in order, and can be attached to.
		for i, k := range keys {
			st, b := req(http.MethodGet, "/sessions/orig/turns/"+k+"/events", "alice-token", "")
			if st != 200 || !strings.Contains(b, `"type":"completed"`) || !strings.Contains(b, fmt.Sprintf("answer: follow %d", i)) {
				t.Errorf("follow-up %d (%s): %d %s", i, k, st, b)
			}
		}
		if st, _ := req(http.MethodPost, "/sessions/orig/followup", "", `{"text":"x"}`); st != 401 {
			t.Errorf("follow-up without a token: %d", st)
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
