package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/httpagent"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// Two agents served by one process over HTTP (as `fastagent dev --agent
// name=folder` serves them): each answers its own sessions — the same
// session name on both is two sessions, two workflows on two task queues,
// two transcripts; a token limited to one agent gets 404 on the other; the
// main agent refuses a session name the other agent's prefix claims; each
// agent lists only its own sessions.
func TestSeveralAgentsOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	name := fmt.Sprintf("second%d", time.Now().UnixNano()%1_000_000_000)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "persona.md"), []byte("You are the SECOND agent."), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tokens := "admin:admin:" + ingress.HashToken("admin-tok") + "\n" +
		"carol:invoke,control:" + ingress.HashToken("carol-tok") + ":" + name
	ctx := context.Background()
	run, err := e.runtime(func(c *serve.Config, _ *serve.Components) {
		c.Agents, c.APITokens, c.StateDir = map[string]string{name: dir}, tokens, t.TempDir()
		c.Roles, c.Listener = serve.Roles{Worker: true, Ingress: true}, ln
	}).Start(ctx, e.client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run.Stop)
	m := e.kit.Model
	m.EnqueueFor("who answers? MAINQ", modelserver.Reply{Text: []string{"the main agent"}})
	m.EnqueueFor("who answers? SECONDQ", modelserver.Reply{Text: []string{"the second agent"}})
	m.EnqueueFor("carol asks", modelserver.Reply{Text: []string{"hello carol"}})

	turn := func(base, token, session, text string) string {
		t.Helper()
		evs := collect(t, &httpagent.Agent{BaseURL: base, Token: token}, ctx, session, text)
		must(t, evs, agent.TypeCompleted)
		var out strings.Builder
		for _, ev := range evs {
			if ev.Type == agent.TypeText {
				out.WriteString(ev.Delta)
			}
		}
		return out.String()
	}
	second := run.URL + "/agents/" + name
	const s = "same-name"
	if got := turn(run.URL, "admin-tok", s, "who answers? MAINQ"); got != "the main agent" {
		t.Errorf("main agent answered %q", got)
	}
	if got := turn(second, "admin-tok", s, "who answers? SECONDQ"); got != "the second agent" {
		t.Errorf("second agent answered %q", got)
	}
	for _, r := range m.Requests() {
		sys := r.Messages[0].Content
		if strings.Contains(r.LastUserText(), "SECONDQ") != strings.Contains(sys, "You are the SECOND agent.") {
			t.Errorf("request %q ran with the wrong agent's system prompt: %q", r.LastUserText(), sys)
		}
	}
	// Two workflows, on the two agents' task queues.
	for id, queue := range map[string]string{workflows.WorkflowID(s): e.queue, workflows.WorkflowID(name + "/" + s): name} {
		d, err := e.client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatalf("describe %s: %v", id, err)
		}
		if got := d.GetExecutionConfig().GetTaskQueue().GetName(); got != queue {
			t.Errorf("%s runs on task queue %q, want %q", id, got, queue)
		}
	}
	for session, want := range map[string]string{s: "the main agent", name + "/" + s: "the second agent"} {
		if got := lastAssistantText(t, e, session); got != want {
			t.Errorf("store session %q ends with %q, want %q", session, got, want)
		}
	}

	// carol's token reaches the second agent only.
	if got := turn(second, "carol-tok", "carol-1", "carol asks"); got != "hello carol" {
		t.Errorf("carol's turn answered %q", got)
	}
	refusals := []struct {
		method, url, token, body string
		status                   int
		code                     string
	}{
		{"POST", run.URL + "/invoke", "carol-tok", `{"session":"c2","text":"hi"}`, 404, ingress.CodeNoSuchAgent},
		{"GET", run.URL + "/sessions/" + s, "carol-tok", "", 404, ingress.CodeNoSuchAgent},
		{"GET", run.URL + "/agents/" + e.queue + "/sessions/" + s, "carol-tok", "", 404, ingress.CodeNoSuchAgent},
		{"GET", run.URL + "/sessions", "carol-tok", "", 404, ingress.CodeNoSuchAgent},
		{"GET", second + "/sessions/" + s, "carol-tok", "", 404, agent.CodeNoSuchSession},
		{"POST", run.URL + "/agents/nobody/invoke", "admin-tok", `{"session":"c3","text":"hi"}`, 404, ingress.CodeNoSuchAgent},
		{"POST", run.URL + "/invoke", "admin-tok", `{"session":"` + name + `/x","text":"hi"}`, 400, agent.CodeInvalidCommand},
		{"GET", second + "/sessions/" + s, "", "", 401, ingress.CodeUnauthorized},
	}
	for _, r := range refusals {
		code, body, _ := send(t, r.method, r.url, r.token, r.body, nil)
		var v struct{ Code string }
		_ = json.Unmarshal([]byte(body), &v)
		if code != r.status || v.Code != r.code {
			t.Errorf("%s %s (token %q) = %d %s, want %d %s", r.method, r.url, r.token, code, body, r.status, r.code)
		}
	}
	if e.sessionExists("c2") || e.sessionExists(name+"/x") || e.sessionExists("nobody/c3") {
		t.Error("a refused request started a session")
	}

	// Each agent lists its own sessions, by the names its callers use.
	list := func(base string) []string {
		t.Helper()
		code, body, _ := send(t, "GET", base+"/sessions", "admin-tok", "", nil)
		if code != http.StatusOK {
			t.Fatalf("list %s: %d %s", base, code, body)
		}
		var v struct{ Sessions []struct{ Session string } }
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, si := range v.Sessions {
			out = append(out, si.Session)
		}
		return out
	}
	if got := list(second); strings.Join(got, ",") != "carol-1,"+s {
		t.Errorf("the second agent lists %v, want [carol-1 %s]", got, s)
	}
	for _, got := range list(run.URL) {
		if got == "carol-1" || strings.HasPrefix(got, name+"/") {
			t.Errorf("the main agent lists the second's session %q", got)
		}
	}
	code, body, _ := send(t, "GET", second+"/sessions/"+s, "admin-tok", "", nil)
	var view struct{ Session string }
	if code != 200 || json.Unmarshal([]byte(body), &view) != nil || view.Session != s {
		t.Errorf("GET the second agent's session = %d %s, want it named %q", code, body, s)
	}
}

// lastAssistantText is the text of the last assistant entry of a stored
// session.
func lastAssistantText(t *testing.T, e *env, session string) string {
	t.Helper()
	all, err := e.kit.Store.Entries(context.Background(), session)
	if err != nil {
		t.Fatalf("entries of %s: %v", session, err)
	}
	for i := len(all) - 1; i >= 0; i-- {
		if m := all[i].Message; m != nil && m.Role == "assistant" {
			return m.Text
		}
	}
	return ""
}

// An agent served beside the main one has schedules of its own: its
// schedules/<name>.yaml becomes schedule:<agent>/<name>, and a fire runs
// the agent's definition in the agent's own session, which its HTTP routes
// reach as schedule:<name>.
func TestAnotherAgentsSchedule(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	name := fmt.Sprintf("sched%d", time.Now().UnixNano()%1_000_000_000)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "persona.md"), []byte("You are the SCHEDULED agent."), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, schedules.Dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, schedules.Dir, "digest.yaml"), []byte(schedYAML("0 6 * * *", "UTC", "morning digest")), 0o644); err != nil {
		t.Fatal(err)
	}
	full := name + "/digest"
	e.deleteScheduleAtEnd(full)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := e.runtime(func(c *serve.Config, _ *serve.Components) {
		c.Agents, c.APIToken, c.StateDir = map[string]string{name: dir}, "admin-tok", t.TempDir()
		c.Roles, c.Listener = serve.Roles{Worker: true, Ingress: true}, ln
	}).Start(ctx, e.client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run.Stop)
	waitListed(t, e, full)
	e.kit.Model.EnqueueFor("morning digest", modelserver.Reply{Text: []string{"nothing new"}})
	ex, err := schedules.Trigger(ctx, e.client, full, 0)
	if err != nil {
		t.Fatalf("trigger: %v", err)
	}
	rec, err := schedules.Wait(ctx, e.client, ex)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if rec.Outcome != workflows.FireCompleted || rec.Session != name+"/schedule:digest" || rec.Reply != "nothing new" {
		t.Fatalf("fire record = %+v, want completed in session %s/schedule:digest", rec, name)
	}
	for _, r := range e.kit.Model.Requests() {
		if r.LastUserText() == "morning digest" && !strings.Contains(r.Messages[0].Content, "You are the SCHEDULED agent.") {
			t.Errorf("the fire ran without the agent's persona: %q", r.Messages[0].Content)
		}
	}
	code, body, _ := send(t, "GET", run.URL+"/agents/"+name+"/sessions/schedule:digest/transcript", "admin-tok", "", nil)
	if code != http.StatusOK || !strings.Contains(body, "nothing new") {
		t.Errorf("the agent's schedule session over HTTP = %d %s", code, body)
	}
	if _, body, _ := send(t, "GET", run.URL+"/sessions/schedule:digest/transcript", "admin-tok", "", nil); strings.Contains(body, "nothing new") {
		t.Errorf("the main agent serves the other agent's schedule session: %s", body)
	}
}
