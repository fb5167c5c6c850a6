package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestSlackStreams: a mention whose turn streams text, calls one tool and
// streams more is answered with Slack's native stream: chat.startStream,
// appends, the tool as task updates (name and status, never its
// arguments), chat.stopStream, and a final text equal to the stored
// answer — in one message.
func TestSlackStreams(t *testing.T) {
	t.Parallel()
	s := newSlackStack(t)
	const argSecret = "tool-argument-never-shown"
	s.e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"Let me ", "count."}, ChunkDelay: 200 * time.Millisecond,
			ToolCalls: []modelserver.ToolCall{{ID: "call_1", Name: testkit.CounterName, Args: `{"note":"` + argSecret + `"}`}}},
		modelserver.Reply{Text: []string{"Counted", " once,", " and", " that", " is", " all."}, ChunkDelay: 300 * time.Millisecond},
	)
	s.startWorker()
	const channel, ts = "C0STREAM", "1515449900.000001"
	session := slack.SessionID(s.team, channel, ts)
	t.Cleanup(func() { s.terminate(session) })
	if code, _, _ := s.post(s.event("EvStream", "app_mention", "", channel, ts, "", "<@U0LAN0Z89> count for me"), slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	key := "slack:" + s.team + ":" + channel + ":" + ts
	var rec agentloop.Outcome
	waitFor(t, 2*time.Minute, "the turn record", func() bool {
		r, err := s.e.kit.Store.Turn(context.Background(), session, key)
		return err == nil && json.Unmarshal(r.Outcome, &rec) == nil
	})
	steps, err := relay.StoredSteps(context.Background(), s.e.kit.Store, session, rec)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, st := range steps {
		if st = strings.TrimSpace(st); st != "" {
			parts = append(parts, st)
		}
	}
	want := strings.Join(parts, "\n\n")
	waitFor(t, time.Minute, "the stream stopped", func() bool { return s.fake.settled(1) })

	starts := s.fake.srv.Calls("chat.startStream")
	if len(starts) != 1 {
		t.Fatalf("chat.startStream calls = %d, want 1", len(starts))
	}
	if st := starts[0]; st.Get("thread_ts") != ts || st.Get("recipient_team_id") != s.team || st.Get("recipient_user_id") != "U061F7AUR" {
		t.Errorf("chat.startStream params %v, want thread %s, team %s, user U061F7AUR", st.Params, ts, s.team)
	}
	if n := len(s.fake.srv.Calls("chat.appendStream")); n < 1 {
		t.Errorf("chat.appendStream calls = %d, want at least 1", n)
	}
	if n := len(s.fake.srv.Calls("chat.stopStream")); n < 1 {
		t.Errorf("chat.stopStream calls = %d, want at least 1", n)
	}
	for _, c := range s.fake.srv.Calls("chat.postMessage") {
		if !strings.Contains(c.Get("blocks"), "fastagent_stop") {
			t.Errorf("chat.postMessage %v, want none but the Stop button's (the reply is the stream)", c.Params)
		}
	}
	replies := s.fake.replies("")
	if len(replies) != 1 {
		t.Fatalf("replies = %+v, want one", replies)
	}
	m := replies[0]
	if !m.Stream || m.Thread != ts || m.Text != want || !strings.Contains(want, "that is all.") {
		t.Errorf("reply = %+v, want a stream in thread %s ending as the stored answer %q", m, ts, want)
	}
	statuses := map[string]bool{}
	for _, task := range m.Tasks {
		if task.ID == "call_1" && task.Title == testkit.CounterName {
			statuses[task.Status] = true
		}
	}
	if !statuses["in_progress"] || !statuses["complete"] {
		t.Errorf("task updates %+v, want call_1 (%s) in_progress then complete", m.Tasks, testkit.CounterName)
	}
	for _, c := range s.fake.srv.Calls() {
		if strings.Contains(string(c.Raw), argSecret) {
			t.Errorf("%s carried the tool's arguments: %s", c.Method, c.Raw)
		}
	}
	waitFor(t, 30*time.Second, "the assistant status cleared", func() bool {
		st := s.fake.srv.Statuses()
		return len(st) > 0 && st[len(st)-1].Status == ""
	})
	if st := s.fake.srv.Statuses(); st[0].Status != slack.ThinkingStatus {
		t.Errorf("assistant statuses = %+v, want thinking first", st)
	}
}
