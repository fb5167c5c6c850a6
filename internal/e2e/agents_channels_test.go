package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// Another agent's Slack app, served by the same process at
// /agents/<name>/slack (as `fastagent dev --agent name=folder` serves a
// folder with channels/slack.yaml): a mention signed with its own secret
// becomes a turn of that agent — its chat workflow chat:<name>/slack:…,
// its session <name>/slack:… on its task queue, its persona — answered in
// the thread with its own bot token. The same event signed with another
// secret is refused and starts nothing.
func TestAnotherAgentsSlack(t *testing.T) {
	e := newEnv(t)
	fake := newFakeSlack(t)
	name := fmt.Sprintf("reviewer%d", time.Now().UnixNano()%1_000_000_000)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "channels"), 0o755); err != nil {
		t.Fatal(err)
	}
	for file, body := range map[string]string{
		"persona.md":          "You are the REVIEWER.",
		"channels/slack.yaml": "signingSecretEnv: REVIEWER_SLACK_SIGNING_SECRET\nbotTokenEnv: REVIEWER_SLACK_BOT_TOKEN\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "reviewer-signing-secret"
	getenv := func(k string) string {
		switch k {
		case "REVIEWER_SLACK_SIGNING_SECRET":
			return secret
		case "REVIEWER_SLACK_BOT_TOKEN":
			return "xoxb-reviewer"
		case slack.APIURLEnv:
			return fake.srv.URL + "/"
		}
		return e.kit.Getenv(k)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	run, err := e.runtime(func(c *serve.Config, _ *serve.Components) {
		c.Agents, c.StateDir, c.Getenv = map[string]string{name: dir}, t.TempDir(), getenv
		c.Roles, c.Listener = serve.Roles{Worker: true, Ingress: true}, ln
	}).Start(context.Background(), e.client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run.Stop)
	e.kit.Model.EnqueueFor("please review", modelserver.Reply{Text: []string{"Reviewed:", " looks good."}})

	s := &slackStack{e: e, fake: fake, team: fmt.Sprintf("T%d", time.Now().UnixNano())}
	const channel, ts = "C0REVIEW", "1515449950.000001"
	body := s.event("EvReview", "app_mention", "", channel, ts, "", "<@U0LAN0Z89> please review")
	post := func(secret string) int {
		req, err := http.NewRequest(http.MethodPost, run.URL+"/agents/"+name+"/slack", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = slack.Sign(secret, time.Now(), body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	session := name + "/" + slack.SessionID(s.team, channel, ts)
	if code := post(slackSecret); code != http.StatusUnauthorized {
		t.Fatalf("an event signed with another app's secret: %d, want 401", code)
	}
	if s.workflowExists(session) {
		t.Fatal("a refused event started the session")
	}
	if code := post(secret); code != http.StatusOK {
		t.Fatalf("a signed event: %d", code)
	}
	// Settled: the streamed answer finished and the Stop button's message
	// under it removed (it comes and goes while the answer streams).
	waitFor(t, 90*time.Second, "the answer in the thread", func() bool {
		msgs := fake.replies("")
		return fake.settled(1) && len(msgs) == 1 && strings.Contains(msgs[0].Text, "Reviewed: looks good.")
	})
	msgs := fake.replies("")
	if len(msgs) != 1 || msgs[0].Thread != ts || !strings.Contains(msgs[0].Text, "Reviewed: looks good.") {
		t.Fatalf("replies %+v, want one answer in thread %s", msgs, ts)
	}
	for _, c := range fake.srv.Calls("") {
		if auth := c.Header.Get("Authorization"); auth != "" && auth != "Bearer xoxb-reviewer" {
			t.Errorf("%s called with %q, want the reviewer's bot token", c.Method, auth)
		}
	}
	ctx := context.Background()
	for id, queue := range map[string]string{
		workflows.WorkflowID(session):                                     name,
		workflows.ScopedChatWorkflowID(name, "slack", s.team+":"+channel): name,
	} {
		d, err := e.client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatalf("describe %s: %v", id, err)
		}
		if got := d.GetExecutionConfig().GetTaskQueue().GetName(); got != queue {
			t.Errorf("%s runs on task queue %q, want %q", id, got, queue)
		}
	}
	if reqs := e.kit.Model.Requests(); len(reqs) != 1 || !strings.Contains(reqs[0].Messages[0].Content, "You are the REVIEWER.") {
		t.Errorf("the turn did not run with the reviewer's persona: %d requests", len(reqs))
	}
	t.Cleanup(func() {
		for _, id := range []string{workflows.WorkflowID(session), workflows.ScopedChatWorkflowID(name, "slack", s.team+":"+channel)} {
			_ = e.client.TerminateWorkflow(context.Background(), id, "", "test done")
		}
	})
}
