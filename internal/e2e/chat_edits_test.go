package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// TestSlackDeletedQueuedTurn: a thread reply queued behind a running turn
// of its session, then deleted in Slack (message_deleted), is dropped: it
// never runs and gets no reply; the running turn is answered.
func TestSlackDeletedQueuedTurn(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	chatDeletion("TDELE2E", true)(t, e, "")
}

// deletedEvent is a message_deleted event of ts in channel.
func (s *slackStack) deletedEvent(eventID, channel, ts, threadTS string) []byte {
	prev := map[string]any{"type": "message", "user": "U061F7AUR", "text": "for four please", "ts": ts, "thread_ts": threadTS}
	now := fmt.Sprintf("%d.000900", time.Now().Unix())
	inner := map[string]any{"type": "message", "subtype": "message_deleted", "hidden": true, "channel": channel, "channel_type": "channel",
		"ts": now, "deleted_ts": ts, "event_ts": now, "previous_message": prev}
	b, _ := json.Marshal(map[string]any{
		"token": "ZZZZZZWSxiZZZ2yIvs3peJ", "team_id": s.team, "api_app_id": "A0MDYCDME",
		"event": inner, "type": "event_callback", "event_id": eventID, "event_time": 1515449522,
		"authorizations": []map[string]any{{"team_id": s.team, "user_id": "U0LAN0Z89", "is_bot": true}},
	})
	return b
}

// runChatDeletion drives a deletion of a queued turn's message through a
// Slack door and returns the chat workflow's ID (chat) or the session's.
func runChatDeletion(chat bool) func(t *testing.T, e *env, session string) string {
	return chatDeletion(fmt.Sprintf("TDEL%v", chat), chat)
}

// chatDeletion is runChatDeletion in workspace team (one per test: chat
// workflows outlive a test's environment on a shared server).
func chatDeletion(team string, chat bool) func(t *testing.T, e *env, session string) string {
	return func(t *testing.T, e *env, _ string) string {
		fake := newFakeSlack(t)
		replier := slack.NewReplier("xoxb-history", fake.srv.URL)
		e.startWorker(withRepliers(replier))
		door := &slack.Door{SigningSecret: slackSecret, Policy: wire.ChatPolicy{GroupMode: wire.GroupContext}}
		srv := httptest.NewServer(channels.Handler(door, e.client, e.queue, nil))
		t.Cleanup(srv.Close)
		s := &slackStack{e: e, fake: fake, door: srv, team: team}
		const channel, root, reply = "C0DEL", "1600000100.000001", "1600000100.000002"
		release := make(chan struct{})
		var once sync.Once
		open := func() { once.Do(func() { close(release) }) }
		// Registered last, so it runs first: a failed wait never leaves
		// the model call (and the worker's shutdown) blocked.
		t.Cleanup(open)
		e.kit.Model.Handle(func(req modelserver.Request) modelserver.Reply {
			<-release
			return modelserver.Reply{Text: []string{"booked ", "a table"}}
		})
		session := slack.SessionID(s.team, channel, root)
		post := func(body []byte) {
			t.Helper()
			if code, _, _ := s.post(body, slackSecret, time.Now(), nil); code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
		}
		post(s.event("EvDel1", "message", "channel", channel, root, "", "<@U0LAN0Z89> book a table"))
		waitModelCalls(t, e, 1)
		post(s.event("EvDel2", "message", "channel", channel, reply, root, "for four please"))
		queued := func(n int) func() bool {
			return func() bool {
				v, err := e.agent.State(context.Background(), session)
				return err == nil && len(v.Queued) == n
			}
		}
		waitFor(t, time.Minute, "the reply queued", queued(1))
		post(s.deletedEvent("EvDel3", channel, reply, root))
		waitFor(t, time.Minute, "the queued turn dropped", queued(0))
		open()
		waitFor(t, time.Minute, "the first turn's reply settled", func() bool { return fake.settled(1) })
		waitFor(t, time.Minute, "the session idle", func() bool {
			v, err := e.agent.State(context.Background(), session)
			return err == nil && v.Running == "" && len(v.Queued) == 0
		})
		if reqs := e.kit.Model.Requests(); len(reqs) != 1 || !strings.Contains(reqs[0].LastUserText(), "book a table") {
			t.Fatalf("model saw %d requests; want only the first turn's", len(reqs))
		}
		if ms := fake.srv.Messages(""); len(ms) != 1 {
			t.Fatalf("%d messages posted, want the first turn's answer only", len(ms))
		}
		if chat {
			return workflows.ChatWorkflowID(slack.Kind, s.team+":"+channel)
		}
		return workflows.WorkflowID(session)
	}
}
