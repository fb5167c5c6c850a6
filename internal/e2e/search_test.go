package e2e

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// searchUntil polls the session search for f (restricted to the env's own
// agent: its task queue) until it returns exactly want, or fails the test
// after a deadline: visibility is eventually consistent.
func (e *env) searchUntil(t *testing.T, f sessionstart.Filter, want ...string) {
	t.Helper()
	f.Agent = e.queue
	slices.Sort(want)
	var got []string
	if !wait.Until(30*time.Second, func() bool {
		page, err := sessionstart.Search(context.Background(), e.client, f, 50, "")
		if err != nil {
			t.Fatalf("search %s: %v", sessionstart.Query(f), err)
		}
		got = got[:0]
		for _, h := range page.Sessions {
			got = append(got, h.Session)
		}
		slices.Sort(got)
		return slices.Equal(got, want)
	}) {
		t.Fatalf("search %s = %v, want %v", sessionstart.Query(f), got, want)
	}
}

// Sessions can be found by their search attributes: two HTTP sessions of
// two token principals and one Slack session, each query returning
// exactly its sessions; a running turn leaves FastAgentStatus idle (only
// a wait for a person changes it), and a status no session has is refused;
// GET /sessions and `fastagent session list` filter the same way.
func TestSessionSearchAttributes(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	hs := e.authIngress(nil)
	e.kit.Model.Handle(echo)
	for _, p := range []struct{ token, session string }{{"alice-token", "sa-alice"}, {"bob-token", "sa-bob"}} {
		st, body, _ := send(t, http.MethodPost, hs.URL+"/invoke", p.token, `{"session":"`+p.session+`","text":"hi"}`, nil)
		if st != 200 || !strings.Contains(body, "answer to hi") {
			t.Fatalf("%s: %d %s", p.session, st, body)
		}
	}
	err := channels.SignalSession(context.Background(), e.client, e.queue, "sa-slack", wire.Delivery{
		Key: "Ev1", Source: "slack", Prompt: agent.Prompt{Text: "from slack"},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, e, "sa-slack", 1)

	e.searchUntil(t, sessionstart.Filter{Channel: "slack"}, "sa-slack")
	e.searchUntil(t, sessionstart.Filter{Channel: "http"}, "sa-alice", "sa-bob")
	e.searchUntil(t, sessionstart.Filter{Principal: "alice"}, "sa-alice")
	e.searchUntil(t, sessionstart.Filter{Principal: "bob"}, "sa-bob")
	e.searchUntil(t, sessionstart.Filter{Status: workflows.StatusIdle}, "sa-alice", "sa-bob", "sa-slack")

	// A running turn does not change the status (only a wait for a person
	// does): the session stays idle while the turn runs and after.
	hold := make(chan struct{})
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"slow"}, Hold: hold})
	calls := e.kit.Model.Count()
	done := make(chan struct{})
	go func() {
		defer close(done)
		send(t, http.MethodPost, hs.URL+"/invoke", "alice-token", `{"session":"sa-alice","text":"take your time"}`, nil)
	}()
	waitFor(t, 30*time.Second, "the held model call to start", func() bool { return e.kit.Model.Count() > calls })
	e.searchUntil(t, sessionstart.Filter{Status: workflows.StatusIdle, Principal: "alice"}, "sa-alice")
	close(hold)
	<-done
	e.searchUntil(t, sessionstart.Filter{Status: workflows.StatusIdle, Principal: "alice"}, "sa-alice")

	// A status no session has is refused, saying which there are.
	if st, body, _ := send(t, http.MethodGet, hs.URL+"/sessions?status=running", "admin-token", "", nil); st != http.StatusBadRequest ||
		!strings.Contains(body, "waiting_approval") {
		t.Errorf("GET /sessions?status=running = %d %s, want 400 naming the statuses", st, body)
	}

	// Over HTTP: an admin filters by channel; bob asking for every http
	// session gets only his own.
	for _, c := range []struct{ token, query, want string }{
		{"admin-token", "channel=slack", "sa-slack"},
		{"bob-token", "channel=http", "sa-bob"},
	} {
		st, body, _ := send(t, http.MethodGet, hs.URL+"/sessions?agent="+url.QueryEscape(e.queue)+"&"+c.query, c.token, "", nil)
		var page sessionstart.Page
		if err := json.Unmarshal([]byte(body), &page); st != 200 || err != nil {
			t.Fatalf("GET /sessions?%s: %d %s", c.query, st, body)
		}
		if len(page.Sessions) != 1 || page.Sessions[0].Session != c.want || page.Sessions[0].Agent != e.queue {
			t.Errorf("GET /sessions?%s as %s = %s, want only %s", c.query, c.token, body, c.want)
		}
	}

	// The CLI prints only the Slack session.
	cmd := exec.Command(fastagentBinary(t), "session", "list", "--url", hs.URL, "--agent", e.queue, "--channel", "slack")
	cmd.Env = append(os.Environ(), "FASTAGENT_API_TOKEN=admin-token")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fastagent session list: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "sa-slack ") || !strings.Contains(lines[1], " slack ") {
		t.Errorf("fastagent session list --channel slack printed:\n%s\nwant a header and the sa-slack row only", out)
	}
}

// On a namespace without the session search attributes sessions still
// run: the durable agent and the channel door start them without the
// attributes when Temporal refuses them, and the session workflows never
// upsert (an unknown attribute would fail their workflow tasks).
func TestSessionsWithoutSearchAttributes(t *testing.T) {
	srv, err := devserver.Start(context.Background(), devserver.Options{DatabaseFile: filepath.Join(t.TempDir(), "temporal.db"), UIPort: -1, NoSearchAttributes: true, LogWriter: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	c, err := tclient.Dial(context.Background(), tclient.Config{
		Address: srv.FrontendAddress(), APIKey: srv.APIKey(), Plaintext: true, Namespace: srv.Namespace(),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if missing, err := sessionstart.Missing(context.Background(), c, srv.Namespace()); err != nil || len(missing) != len(workflows.SearchAttributeNames()) {
		t.Fatalf("the server has attributes registered: missing %v (%v)", missing, err)
	}
	k := testkit.New(t)
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	const queue = "e2e-no-search-attributes"
	parts, err := k.Runtime(context.Background(), bus, serve.Config{TaskQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(parts.Close)
	w, err := parts.StartWorker(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	a := &durable.Agent{Client: c, Feed: bus, TaskQueue: queue, Store: k.Store}
	k.Model.Handle(echo)
	for _, text := range []string{"hi", "again"} {
		must(t, collect(t, a, context.Background(), "plain", text), agent.TypeCompleted)
	}
	if err := channels.SignalSession(context.Background(), c, queue, "slack-plain", wire.Delivery{
		Key: "Ev1", Source: "slack", Prompt: agent.Prompt{Text: "from slack"},
	}); err != nil {
		t.Fatalf("signal-with-start without the attributes: %v", err)
	}
	waitFor(t, time.Minute, "the slack session to run its turn", func() bool {
		v, err := a.State(context.Background(), "slack-plain")
		return err == nil && v.Turns == 1 && v.Running == ""
	})
	for _, s := range []string{"plain", "slack-plain"} {
		it := c.GetWorkflowHistory(context.Background(), workflows.WorkflowID(s), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED {
				t.Errorf("%s: a workflow task failed: %v", s, ev.GetWorkflowTaskFailedEventAttributes().GetFailure())
			}
			// The SDK upserts TemporalChangeVersion for GetVersion; no
			// session attribute may be upserted or set at start.
			fields := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
			for k := range ev.GetWorkflowExecutionStartedEventAttributes().GetSearchAttributes().GetIndexedFields() {
				t.Errorf("%s: started with search attribute %s", s, k)
			}
			for k := range fields {
				if strings.HasPrefix(k, "FastAgent") {
					t.Errorf("%s: upserted %s", s, k)
				}
			}
		}
	}
}

// A session's sub-agents are found by their parent: GET /sessions?parent=
// lists the Delegate workflows a session's turn started (channel
// delegate), for the session's owner, and nothing for another principal.
func TestSessionSearchFindsSubAgents(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + delegationConfig)
	e.startWorker()
	hs := e.authIngress(nil)
	e.kit.Model.EnqueueFor("find both",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("p1", "self", "first (PARENTA)"), delegateCall("p2", "self", "second (PARENTB)")}},
		modelserver.Reply{Text: []string{"found both"}})
	e.kit.Model.EnqueueFor("PARENTA", modelserver.Reply{Text: []string{"a"}})
	e.kit.Model.EnqueueFor("PARENTB", modelserver.Reply{Text: []string{"b"}})
	const session = "sa-parent"
	st, body, _ := send(t, http.MethodPost, hs.URL+"/invoke", "alice-token", `{"session":"`+session+`","text":"find both"}`, map[string]string{"Idempotency-Key": "both"})
	if st != 200 || !strings.Contains(body, "found both") {
		t.Fatalf("the delegating turn: %d %s", st, body)
	}
	want := []string{agentloop.DelegateSession(session, "both", "p1"), agentloop.DelegateSession(session, "both", "p2")}
	slices.Sort(want)
	var page sessionstart.Page
	var got []string
	if !wait.Until(30*time.Second, func() bool {
		st, body, _ := send(t, http.MethodGet, hs.URL+"/sessions?parent="+url.QueryEscape(session), "alice-token", "", nil)
		page = sessionstart.Page{}
		if err := json.Unmarshal([]byte(body), &page); st != 200 || err != nil {
			t.Fatalf("GET /sessions?parent=: %d %s", st, body)
		}
		got = got[:0]
		for _, h := range page.Sessions {
			got = append(got, h.Session)
		}
		slices.Sort(got)
		return slices.Equal(got, want)
	}) {
		t.Fatalf("GET /sessions?parent=%s = %v, want the sub-agents %v", session, got, want)
	}
	for _, h := range page.Sessions {
		if h.Parent != session || h.Channel != "delegate" || h.Principal != "alice" {
			t.Errorf("sub-agent %+v, want parent %s, channel delegate, principal alice", h, session)
		}
	}
	st, body, _ = send(t, http.MethodGet, hs.URL+"/sessions?parent="+url.QueryEscape(session), "bob-token", "", nil)
	if err := json.Unmarshal([]byte(body), &page); st != 200 || err != nil || len(page.Sessions) != 0 {
		t.Errorf("bob listing alice's session's sub-agents: %d %s, want none", st, body)
	}
}
