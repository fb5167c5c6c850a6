package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/github"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/testsupport/fakegithub"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

const githubSecret = "e2e-github-webhook-secret"

// githubRules is the channel file of these tests: a mention in an issue
// comment is a turn in the session; an opened pull request is a
// review.
const githubRules = `bot: fastagent-bot
rules:
  - event: issue_comment
    action: created
    mentions: "@fastagent-bot"
  - event: pull_request
    action: opened
    prompt: "Review {{.url}}: {{.title}}"
    review: true
`

// githubStack is a GitHub door on real HTTP and a fake GitHub API.
type githubStack struct {
	e    *env
	fake *fakegithub.Server
	door *httptest.Server
	// repo makes the tests' sessions unique.
	repo string
	env  map[string]string
}

func newGitHubStack(t *testing.T, e *env) *githubStack {
	s := &githubStack{e: e, fake: fakegithub.New(), repo: fmt.Sprintf("octo/r%d", time.Now().UnixNano())}
	t.Cleanup(s.fake.Close)
	s.env = map[string]string{"GITHUB_WEBHOOK_SECRET": githubSecret, "GITHUB_TOKEN": "ghp_e2e", github.APIURLEnv: s.fake.URL}
	ch, err := github.New([]byte(githubRules), func(k string) string { return s.env[k] })
	if err != nil {
		t.Fatal(err)
	}
	s.door = httptest.NewServer(channels.Handler(ch.Door, e.client, e.queue, nil))
	t.Cleanup(s.door.Close)
	return s
}

func (s *githubStack) startWorker() sdkworker.Worker {
	s.e.t.Helper()
	ch, err := github.New([]byte(githubRules), func(k string) string { return s.env[k] })
	if err != nil {
		s.e.t.Fatal(err)
	}
	return s.e.startWorker(withRepliers(ch.Replier))
}

// payload is testdata fixture name with the stack's repo and number n.
func (s *githubStack) payload(name string, n int) []byte {
	s.e.t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "channels", "github", "testdata", name))
	if err != nil {
		s.e.t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("Codertocat/Hello-World"), []byte(s.repo))
	b = bytes.ReplaceAll(b, []byte(`"number": 1,`), []byte(fmt.Sprintf(`"number": %d,`, n)))
	b = bytes.ReplaceAll(b, []byte(`"number": 2,`), []byte(fmt.Sprintf(`"number": %d,`, n)))
	return b
}

// post sends body as event with delivery ID, signed with secret.
func (s *githubStack) post(event, delivery, secret string, body []byte) int {
	s.e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.door.URL+"/github", bytes.NewReader(body))
	if err != nil {
		s.e.t.Fatal(err)
	}
	req.Header = github.Sign(secret, event, delivery, body)
	if secret == "" {
		req.Header.Del(github.HeaderSignature)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.e.t.Fatalf("POST /github: %v", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (s *githubStack) session(n int) string { return fmt.Sprintf("github:%s#%d", s.repo, n) }

// stored is the stored answer of the turn key in session.
func (s *githubStack) stored(session, key string) string {
	s.e.t.Helper()
	var rec agentloop.Outcome
	waitFor(s.e.t, 2*time.Minute, "the turn record", func() bool {
		r, err := s.e.kit.Store.Turn(context.Background(), session, key)
		return err == nil && json.Unmarshal(r.Outcome, &rec) == nil
	})
	steps, err := relay.StoredSteps(context.Background(), s.e.kit.Store, session, rec)
	if err != nil {
		s.e.t.Fatal(err)
	}
	return strings.Join(steps, "\n\n")
}

// Unsigned and wrongly signed deliveries are refused 401 and start
// nothing; a ping is answered 204.
func TestGitHubDoorRefuses(t *testing.T) {
	t.Parallel()
	s := newGitHubStack(t, newEnv(t))
	body := s.payload("issue_comment.json", 1)
	for _, c := range []struct {
		name, secret string
		body         []byte
	}{
		{"unsigned", "", body},
		{"wrong secret", "not-the-secret", body},
	} {
		if code := s.post("issue_comment", "refused-"+c.name, c.secret, c.body); code != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", c.name, code)
		}
	}
	// Signed, then changed on the way.
	req, _ := http.NewRequest(http.MethodPost, s.door.URL+"/github", bytes.NewReader(append([]byte(" "), body...)))
	req.Header = github.Sign(githubSecret, "issue_comment", "refused-tampered", body)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("tampered body: %v %v, want 401", resp, err)
	}
	if exists(t, s.e, s.session(1)) {
		t.Errorf("a refused delivery started session %s", s.session(1))
	}
	if code := s.post("ping", "ping-1", githubSecret, s.payload("ping.json", 1)); code != http.StatusNoContent {
		t.Errorf("ping: status %d, want 204", code)
	}
}

// exists reports whether session's workflow exists.
func exists(t *testing.T, e *env, session string) bool {
	s := &slackStack{e: e}
	return s.workflowExists(session)
}

// The same delivery three times — the third replayed with a fresh
// X-GitHub-Delivery, which the signature does not cover — runs one turn and
// posts one comment whose body is the stored answer (with its hidden
// marker); an opened pull request is answered with one review.
func TestGitHubExactlyOnce(t *testing.T) {
	t.Parallel()
	s := newGitHubStack(t, newEnv(t))
	s.startWorker()
	const delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	session := s.session(1)
	t.Cleanup(func() { (&slackStack{e: s.e}).terminate(session) })
	body := s.payload("issue_comment.json", 1)
	for i, id := range []string{delivery, delivery, "replayed-with-a-fresh-id"} {
		if code := s.post("issue_comment", id, githubSecret, body); code != http.StatusAccepted {
			t.Fatalf("delivery %d: status %d, want 202", i+1, code)
		}
	}
	key := "github:" + github.BodyID(body) + ":0"
	want := s.stored(session, key)
	waitFor(t, time.Minute, "the comment", func() bool { return len(s.fake.Comments(s.repo, 1)) > 0 })
	// Once more after the answer, as a redelivery from GitHub's UI would,
	// and replayed once more under yet another delivery ID.
	for _, id := range []string{delivery, "replayed-after-the-answer"} {
		if code := s.post("issue_comment", id, githubSecret, body); code != http.StatusAccepted {
			t.Fatalf("late redelivery %s: status %d", id, code)
		}
	}
	time.Sleep(3 * time.Second) // deliberate: a second turn or comment would show itself now
	if n := s.e.kit.Model.Count(); n != 1 {
		t.Errorf("model calls = %d, want 1", n)
	}
	cs := s.fake.Comments(s.repo, 1)
	if len(cs) != 1 || cs[0].Body != want+"\n\n"+github.Marker(key, 0) || !strings.Contains(want, "where is the typo") {
		t.Fatalf("comments %+v, want one with the stored answer %q", cs, want)
	}
	if cs[0].Author != "Bearer ghp_e2e" {
		t.Errorf("posted with %q", cs[0].Author)
	}
	if ref, err := storedReply(t, s.e, session, key); err != nil || ref != fmt.Sprintf("comment:%d", cs[0].ID) {
		t.Errorf("stored reply ref %q, %v", ref, err)
	}

	// A pull request opened: one review.
	prSession := s.session(2)
	t.Cleanup(func() { (&slackStack{e: s.e}).terminate(prSession) })
	prBody := s.payload("pull_request_opened.json", 2)
	if code := s.post("pull_request", "pr-delivery-1", githubSecret, prBody); code != http.StatusAccepted {
		t.Fatalf("pull_request: status %d", code)
	}
	prWant := s.stored(prSession, "github:"+github.BodyID(prBody)+":0")
	waitFor(t, time.Minute, "the review", func() bool { return len(s.fake.Comments(s.repo, 2)) > 0 })
	if rs := s.fake.Comments(s.repo, 2); len(rs) != 1 || !rs[0].Review || rs[0].Event != "COMMENT" || !strings.HasPrefix(rs[0].Body, prWant+"\n\n") {
		t.Fatalf("reviews %+v, want one COMMENT review with %q", rs, prWant)
	}
}

// Two `fastagent worker` processes serve GitHub turns. The one streaming
// the first turn's model reply is SIGKILLed: the turn is retried and the
// issue gets exactly one comment, equal to the stored answer. Then the one
// posting the second turn's comment is SIGKILLed after GitHub created the
// comment and before the reference was stored: the retried reply finds
// the comment by its marker, and there is still exactly one.
func TestGitHubWorkerKilled(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newProcessEnv(t)
	s := newGitHubStack(t, e)
	if err := os.MkdirAll(filepath.Join(e.kit.Dir, "channels"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.kit.Dir, "channels", "github.yaml"), []byte(githubRules), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, v := range s.env {
		e.extraEnv = append(e.extraEnv, k+"="+v)
	}
	slow := make([]string, 20)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: slow, ChunkDelay: 250 * time.Millisecond},
		modelserver.Reply{Text: []string{"recovered", " answer"}},
	)
	workers := map[int]*proc{}
	startWorker := func() {
		p := e.startWorkerProcess(t)
		workers[p.cmd.Process.Pid] = p
	}
	startWorker()
	startWorker()
	streaming := make(chan struct{}, 1)
	e.kit.Model.OnFirstDelta(func(modelserver.Request, time.Time) {
		select {
		case streaming <- struct{}{}:
		default:
		}
	})
	session := s.session(1)
	t.Cleanup(func() { (&slackStack{e: e}).terminate(session) })
	body1 := s.payload("issue_comment.json", 1)
	if code := s.post("issue_comment", "kill-1", githubSecret, body1); code != http.StatusAccepted {
		t.Fatalf("status %d", code)
	}
	select {
	case <-streaming:
	case <-time.After(2 * time.Minute):
		t.Fatal("the model stream never started")
	}
	pid := activityWorkerPID(t, e, session, workflows.ActivityModelGenerate)
	p, ok := workers[pid]
	if !ok {
		t.Fatalf("the activity runs on pid %d, not one of our workers", pid)
	}
	p.kill(t)
	delete(workers, pid)
	key := "github:" + github.BodyID(body1) + ":0"
	want := s.stored(session, key)
	waitFor(t, 2*time.Minute, "the comment", func() bool { return len(s.fake.Comments(s.repo, 1)) > 0 })
	time.Sleep(2 * time.Second) // deliberate: a second comment would show itself now
	if cs := s.fake.Comments(s.repo, 1); len(cs) != 1 || want != "recovered answer" || cs[0].Body != want+"\n\n"+github.Marker(key, 0) {
		t.Fatalf("comments %+v, want exactly one with the stored answer %q", cs, want)
	}
	if n := e.kit.Model.Count(); n != 2 {
		t.Errorf("model calls = %d, want 2 (the cut stream and its retry)", n)
	}

	// Second turn: killed in the post window.
	startWorker()
	held := make(chan fakegithub.Call, 1)
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	s.fake.Hold(func(c fakegithub.Call) {
		select {
		case held <- c:
			<-release
		default:
		}
	})
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"second", " answer"}})
	// Another comment on the same issue (its own comment ID).
	body2 := bytes.ReplaceAll(body1, []byte("492700400"), []byte("492700401"))
	if code := s.post("issue_comment", "kill-2", githubSecret, body2); code != http.StatusAccepted {
		t.Fatalf("status %d", code)
	}
	select {
	case <-held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the second comment was never posted")
	}
	s.fake.Hold(nil)
	pid = activityWorkerPID(t, e, session, workflows.ActivityChannelReply)
	if p, ok = workers[pid]; !ok {
		t.Fatalf("the reply runs on pid %d, not one of our workers", pid)
	}
	p.kill(t)
	close(release)
	key2 := "github:" + github.BodyID(body2) + ":0"
	if ref, err := storedReply(t, e, session, key2); err == nil {
		t.Fatalf("the reference %q was stored before the kill; the window was not hit", ref)
	}
	want2 := s.stored(session, key2)
	// The reply activity times out (1 min) and is retried on the survivor.
	waitFor(t, 3*time.Minute, "the retried reply's reference", func() bool {
		ref, err := storedReply(t, e, session, key2)
		return err == nil && ref != ""
	})
	var mine []fakegithub.Comment
	for _, c := range s.fake.Comments(s.repo, 1) {
		if strings.Contains(c.Body, github.Marker(key2, 0)) {
			mine = append(mine, c)
		}
	}
	if len(mine) != 1 || mine[0].Body != want2+"\n\n"+github.Marker(key2, 0) || want2 != "second answer" {
		t.Fatalf("comments of the second turn %+v, want exactly one with %q", mine, want2)
	}
	if ref, _ := storedReply(t, e, session, key2); ref != fmt.Sprintf("comment:%d", mine[0].ID) {
		t.Errorf("stored ref %q, want comment:%d", ref, mine[0].ID)
	}
	if n := len(s.fake.Calls("comment.create")); n != 2 {
		t.Errorf("%d comment creates over both turns, want 2", n)
	}
	if n := len(s.fake.Calls("comment.list")); n < 1 {
		t.Errorf("the retried reply did not search for its marker")
	}
}
