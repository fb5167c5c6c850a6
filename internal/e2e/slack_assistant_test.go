package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestSlackAssistantThread: an AI app's assistant thread.
//   - assistant_thread_started sets the configured suggested prompts on
//     that thread;
//   - the person's first message there titles the thread;
//   - the turn it starts shows the assistant status "is thinking…", then
//     "is running bash…" while its bash call runs, and clears it at the
//     end — in that order.
func TestSlackAssistantThread(t *testing.T) {
	s := newSlackStack(t)
	cfg := slack.AssistantConfig{Title: "Try these", Prompts: []slack.AssistantPrompt{
		{Title: "Summarize", Message: "Summarize this channel"}, {Title: "Plan", Message: "Plan my day"}}}
	assistant := slack.NewAssistant("xoxb-e2e", s.fake.srv.URL, cfg)
	s.door.Close()
	s.door = httptest.NewServer(channels.Handler(&slack.Door{SigningSecret: slackSecret, APIURL: s.fake.srv.URL, Assistant: assistant},
		s.e.client, s.e.queue, nil))
	t.Cleanup(s.door.Close)
	s.startWorker()
	const channel, thread, ts, user = "D0ASSIST", "1515449700.000001", "1515449700.000002", "U061F7AUR"
	session := slack.SessionID(s.team, channel, thread)
	t.Cleanup(func() { s.terminate(session) })

	started, _ := json.Marshal(map[string]any{
		"token": "x", "team_id": s.team, "api_app_id": "A0MDYCDME", "type": "event_callback", "event_id": "EvAssistStart", "event_time": 1515449700,
		"event": map[string]any{"type": "assistant_thread_started", "event_ts": thread, "assistant_thread": map[string]any{
			"user_id": user, "channel_id": channel, "thread_ts": thread, "context": map[string]any{}}},
		"authorizations": []map[string]any{{"team_id": s.team, "user_id": "U0LAN0Z89", "is_bot": true}},
	})
	if code, body, _ := s.post(started, slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("assistant_thread_started: %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "the suggested prompts", func() bool { return len(s.fake.srv.SuggestedPrompts()) == 1 })
	p := s.fake.srv.SuggestedPrompts()[0]
	if p.Channel != channel || p.Thread != thread || p.Title != "Try these" || len(p.Prompts) != 2 ||
		p.Prompts[0].Title != "Summarize" || p.Prompts[1].Message != "Plan my day" {
		t.Fatalf("suggested prompts %+v, want the configured two on the thread", p)
	}

	s.e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "as1", Name: "bash", Args: `{"command":"sleep 1; echo listed"}`}}},
		modelserver.Reply{Text: []string{"Here is the list."}},
	)
	if code, body, _ := s.post(s.event("EvAssistMsg", "message", "im", channel, ts, thread, "list the   files\nplease"), slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("message: %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "the thread's title", func() bool { return len(s.fake.srv.Titles()) == 1 })
	if ti := s.fake.srv.Titles()[0]; ti.Channel != channel || ti.Thread != thread || ti.Status != "list the files please" {
		t.Errorf("title %+v, want the first message on the thread", ti)
	}
	key := workflows.ChatTurnKey(slack.Kind, s.team+":"+channel, ts)
	waitFor(t, 2*time.Minute, "the turn answered", func() bool {
		r, err := s.e.kit.Store.Turn(context.Background(), session, key)
		var o agentloop.Outcome
		return err == nil && json.Unmarshal(r.Outcome, &o) == nil && o.Status != ""
	})
	waitFor(t, 30*time.Second, "the status cleared", func() bool {
		st := s.fake.srv.Statuses()
		return len(st) > 0 && st[len(st)-1].Status == ""
	})
	var seq []string
	for _, st := range s.fake.srv.Statuses() {
		if st.Channel != channel || st.Thread != thread {
			t.Errorf("status %+v, want it on the assistant thread", st)
		}
		if len(seq) == 0 || seq[len(seq)-1] != st.Status {
			seq = append(seq, st.Status)
		}
	}
	// Thinking first, bash while it runs, cleared last; thinking may come
	// back between (the model's next step).
	i := index(seq, slack.ThinkingStatus)
	j := index(seq, "is running bash…")
	if i != 0 || j <= i || seq[len(seq)-1] != "" {
		t.Errorf("statuses %q, want %q, then %q, cleared at the end", seq, slack.ThinkingStatus, "is running bash…")
	}
	if n := len(s.fake.srv.Titles()); n != 1 {
		t.Errorf("%d titles set, want 1 (only the first message titles the thread)", n)
	}
	if !strings.Contains(strings.Join(seq, "|"), "is running bash…") {
		t.Errorf("statuses %q never showed the bash call", seq)
	}
}

// index is the position of s in xs, -1 if absent.
func index(xs []string, s string) int {
	for i, x := range xs {
		if x == s {
			return i
		}
	}
	return -1
}
