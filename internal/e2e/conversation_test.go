package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/github"
	"github.com/fastagent/fastagent/internal/channels/telegram"
	"github.com/fastagent/fastagent/internal/testsupport/faketelegram"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// privateUpdate is a Telegram update: user's message id saying text in
// their private chat with the bot (a leading /command is marked as one).
func privateUpdate(user, id int64, text string) []byte {
	msg := map[string]any{
		"message_id": id,
		"from":       map[string]any{"id": user, "is_bot": false, "first_name": "Ada", "username": "ada"},
		"chat":       map[string]any{"id": user, "type": "private"},
		"date":       1764614405,
		"text":       text,
	}
	if strings.HasPrefix(text, "/") {
		n := len(text)
		if i := strings.IndexByte(text, ' '); i > 0 {
			n = i
		}
		msg["entities"] = []map[string]any{{"offset": 0, "length": n, "type": "bot_command"}}
	}
	b, _ := json.Marshal(map[string]any{"update_id": user*1000 + id, "message": msg})
	return b
}

// chatTurn is the recorded outcome of message id in user's private chat
// (its continuous session, renewed renew times by /new), once recorded.
func (s *telegramStack) chatTurn(user, id int64, renew int) (agentloop.Outcome, bool) {
	c := strconv.FormatInt(user, 10)
	session := workflows.ChatSession(telegram.Kind, c, "")
	if renew > 0 {
		session += "~" + strconv.Itoa(renew)
	}
	r, err := s.e.kit.Store.Turn(context.Background(), session, workflows.ChatTurnKey(telegram.Kind, c, strconv.FormatInt(id, 10)))
	var out agentloop.Outcome
	if err != nil || json.Unmarshal(r.Outcome, &out) != nil {
		return out, false
	}
	return out, true
}

// sessionView queries the chat's continuous session.
func (s *telegramStack) sessionView(user int64) workflows.SessionView {
	var v workflows.SessionView
	q, err := s.e.client.QueryWorkflow(context.Background(),
		workflows.WorkflowID(workflows.ChatSession(telegram.Kind, strconv.FormatInt(user, 10), "")), "", workflows.QueryState)
	if err == nil {
		_ = q.Get(&v)
	}
	return v
}

// repliesTo are the bot's messages replying to message id in chat.
func repliesTo(fake *faketelegram.Server, chat, id int64) []faketelegram.Message {
	var out []faketelegram.Message
	for _, m := range fake.Messages(chat) {
		if m.ReplyTo == id {
			out = append(out, m)
		}
	}
	return out
}

// modelSaw reports whether a model request's last user text contains s.
func modelSaw(m *modelserver.Server, s string) bool {
	for _, r := range m.Requests() {
		if strings.Contains(r.LastUserText(), s) {
			return true
		}
	}
	return false
}

// TestConversationWhileBusy: in a Telegram chat, a second message sent
// while the first one's turn runs is queued, steers the running turn,
// interrupts it or is refused, as the channel's whileBusy says.
func TestConversationWhileBusy(t *testing.T) {
	t.Parallel()
	s := newTelegramStack(t, newEnv(t))
	s.startWorker()
	for i, mode := range workflows.WhileBusyModes {
		user := s.user + int64(i+1)*7919
		// The channel file's whileBusy: a door of its own per mode.
		door := *s.ch.Door.(*telegram.Door)
		door.Policy.WhileBusy = mode
		srv := httptest.NewServer(channels.Handler(&door, s.e.client, s.e.queue, nil))
		t.Cleanup(srv.Close)
		t.Cleanup(func() {
			_ = s.e.client.TerminateWorkflow(context.Background(), workflows.ChatWorkflowID(telegram.Kind, strconv.FormatInt(user, 10)), "", "test over")
			_ = s.e.client.TerminateWorkflow(context.Background(),
				workflows.WorkflowID(workflows.ChatSession(telegram.Kind, strconv.FormatInt(user, 10), "")), "", "test over")
		})
		send := func(body []byte) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+telegram.Path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(telegram.SecretHeader, telegramSecret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("POST /telegram: %v", err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("update: status %d", resp.StatusCode)
			}
		}
		hold := make(chan struct{})
		first, second := "first message "+mode, "second message "+mode
		session := workflows.ChatSession(telegram.Kind, strconv.FormatInt(user, 10), "")
		if mode == workflows.WhileBusySteer {
			// A message steers only while the turn is between steps: the
			// first turn's tool runs (held) when the second comes.
			release := s.e.kit.Counter.Hold("held " + mode)
			go func() { <-hold; release() }()
			s.e.kit.Model.EnqueueFor(first, modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "call_held", Name: "counter", Args: `{"note":"held ` + mode + `"}`}}})
		} else {
			s.e.kit.Model.EnqueueFor(first, modelserver.Reply{Text: []string{"working on the first"}, Hold: hold})
		}
		send(privateUpdate(user, 1, first))
		waitFor(t, time.Minute, mode+": the first turn's model call", func() bool { return modelSaw(s.e.kit.Model, first) })
		if mode == workflows.WhileBusySteer {
			waitFor(t, time.Minute, "steer: the first turn's tool runs", func() bool { return s.e.kit.Counter.Started(session) == 1 })
		}
		send(privateUpdate(user, 2, second))

		switch mode {
		case workflows.WhileBusyQueue:
			waitFor(t, time.Minute, "queue: the second message waits", func() bool { return len(s.sessionView(user).Queued) == 1 })
			close(hold)
			waitFor(t, time.Minute, "queue: both answered", func() bool {
				o1, ok1 := s.chatTurn(user, 1, 0)
				o2, ok2 := s.chatTurn(user, 2, 0)
				return ok1 && ok2 && o1.Status == agent.TypeCompleted && o2.Status == agent.TypeCompleted
			})
		case workflows.WhileBusySteer:
			waitFor(t, time.Minute, "steer: the running turn took the message", func() bool { return s.sessionView(user).Steering == 1 })
			close(hold)
			waitFor(t, time.Minute, "steer: the turn answered", func() bool {
				o, ok := s.chatTurn(user, 1, 0)
				return ok && o.Status == agent.TypeCompleted
			})
			if o, _ := s.chatTurn(user, 1, 0); o.Steps != 2 {
				t.Errorf("steer: the turn took %d steps, want 2 (the second message read after the first)", o.Steps)
			}
			if !modelSaw(s.e.kit.Model, second) {
				t.Errorf("steer: the model never saw the second message")
			}
			if _, ok := s.chatTurn(user, 2, 0); ok {
				t.Errorf("steer: the second message ran a turn of its own")
			}
			if n := len(repliesTo(s.fake, user, 2)); n != 0 {
				t.Errorf("steer: %d replies to the second message, want none (the first's answer is its answer)", n)
			}
			// A message that comes while the turn's last model step runs
			// is too late to steer it: it runs as the next turn, answered.
			third, fourth := "third message steer", "fourth message steer"
			hold3 := make(chan struct{})
			s.e.kit.Model.EnqueueFor(third, modelserver.Reply{Text: []string{"working on the third"}, Hold: hold3})
			send(privateUpdate(user, 3, third))
			waitFor(t, time.Minute, "steer: the third turn's model call", func() bool { return modelSaw(s.e.kit.Model, third) })
			send(privateUpdate(user, 4, fourth))
			waitFor(t, time.Minute, "steer: the late message waits as a turn", func() bool { return len(s.sessionView(user).Queued) == 1 })
			if v := s.sessionView(user); v.Steering != 0 {
				t.Errorf("steer: the late message steered the ending turn (%d steering)", v.Steering)
			}
			close(hold3)
			waitFor(t, time.Minute, "steer: the late message answered as its own turn", func() bool {
				o3, ok3 := s.chatTurn(user, 3, 0)
				o4, ok4 := s.chatTurn(user, 4, 0)
				return ok3 && ok4 && o3.Status == agent.TypeCompleted && o4.Status == agent.TypeCompleted && len(repliesTo(s.fake, user, 4)) > 0
			})
			if o, _ := s.chatTurn(user, 3, 0); o.Steps != 1 {
				t.Errorf("steer: the third turn took %d steps, want 1 (the late message is not its)", o.Steps)
			}
		case workflows.WhileBusyInterrupt:
			waitFor(t, time.Minute, "interrupt: the first aborted, the second answered", func() bool {
				o1, ok1 := s.chatTurn(user, 1, 0)
				o2, ok2 := s.chatTurn(user, 2, 0)
				return ok1 && ok2 && o1.Code == agent.CodeAborted && o2.Status == agent.TypeCompleted
			})
			close(hold)
		case workflows.WhileBusyReject:
			waitFor(t, time.Minute, "reject: the busy reply", func() bool {
				r := repliesTo(s.fake, user, 2)
				return len(r) == 1 && strings.Contains(r[0].Text, "still working on an earlier message")
			})
			close(hold)
			waitFor(t, time.Minute, "reject: the first answered", func() bool {
				o, ok := s.chatTurn(user, 1, 0)
				return ok && o.Status == agent.TypeCompleted
			})
			if o, ok := s.chatTurn(user, 2, 0); !ok || o.Code != agent.CodeTurnRunning {
				t.Errorf("reject: the second message's record = %+v (%v), want refused turn_running", o, ok)
			}
			if modelSaw(s.e.kit.Model, second) {
				t.Errorf("reject: the model saw the refused message")
			}
		}
	}
}

// TestConversationDoubleStop: /stop aborts the running turn; a second
// /stop finds nothing running and says so, aborting nothing more.
func TestConversationDoubleStop(t *testing.T) {
	t.Parallel()
	s := newTelegramStack(t, newEnv(t))
	s.startWorker()
	user := s.user
	hold := make(chan struct{})
	defer close(hold)
	s.e.kit.Model.EnqueueFor("write a long essay", modelserver.Reply{Text: []string{"Once"}, Hold: hold})
	s.send(privateUpdate(user, 1, "write a long essay"))
	waitFor(t, time.Minute, "the turn's model call", func() bool { return modelSaw(s.e.kit.Model, "write a long essay") })
	s.send(privateUpdate(user, 2, "/stop"))
	waitFor(t, time.Minute, "the turn aborted", func() bool {
		o, ok := s.chatTurn(user, 1, 0)
		return ok && o.Code == agent.CodeAborted
	})
	s.send(privateUpdate(user, 3, "/stop"))
	s.send(privateUpdate(user, 3, "/stop")) // redelivered: one answer
	waitFor(t, time.Minute, "the second /stop's answer", func() bool {
		r := repliesTo(s.fake, user, 3)
		return len(r) == 1 && strings.Contains(r[0].Text, "Nothing is running")
	})
	if r := repliesTo(s.fake, user, 2); len(r) != 0 {
		t.Errorf("the first /stop answered %q; the stopped turn's reply says it", r[0].Text)
	}
	if n := s.e.kit.Model.Count(); n != 1 {
		t.Errorf("model calls = %d: a /stop is never a turn", n)
	}
	if r := repliesTo(s.fake, user, 3); len(r) != 1 || r[0].Text != telegram.HTML(activities.NothingRunningText) {
		t.Errorf("second /stop answered %+v", r)
	}

	// The stop button of a live reply, clicked twice: the turn is aborted
	// once, the second click is told nothing runs.
	slow := make([]string, 300)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	s.e.kit.Model.EnqueueFor("another long essay", modelserver.Reply{Text: slow, ChunkDelay: 100 * time.Millisecond})
	s.send(privateUpdate(user, 4, "another long essay"))
	waitFor(t, time.Minute, "the live reply's stop button", func() bool {
		r := repliesTo(s.fake, user, 4)
		return len(r) == 1 && fmt.Sprint(r[0].Buttons) == "[fa:stop:4]"
	})
	s.send(stopClick(user, 4, "q1", 41))
	s.send(stopClick(user, 4, "q2", 42))
	waitFor(t, time.Minute, "the turn aborted by the button", func() bool {
		o, ok := s.chatTurn(user, 4, 0)
		return ok && o.Code == agent.CodeAborted
	})
	waitFor(t, time.Minute, "the second click's answer", func() bool {
		n := 0
		for _, m := range repliesTo(s.fake, user, 4) {
			if strings.Contains(m.Text, "Nothing is running") {
				n++
			}
		}
		return n == 1
	})
	if n := s.e.kit.Model.Count(); n != 2 {
		t.Errorf("model calls = %d, want 2: clicks are never turns", n)
	}
	waitFor(t, time.Minute, "the stopped reply settled without its button", func() bool {
		for _, m := range repliesTo(s.fake, user, 4) {
			if strings.Contains(m.Text, "stopped by") && len(m.Buttons) == 0 {
				return true
			}
		}
		return false
	})
}

// stopClick is a press (callback query id) of the stop button on the live
// reply to message turn in user's private chat.
func stopClick(user, turn int64, id string, update int64) []byte {
	b, _ := json.Marshal(map[string]any{"update_id": user*1000 + update, "callback_query": map[string]any{
		"id":   id,
		"from": map[string]any{"id": user, "is_bot": false, "first_name": "Ada", "username": "ada"},
		"message": map[string]any{"message_id": 900000 + turn, "chat": map[string]any{"id": user, "type": "private"},
			"date": 1764614405, "text": "Twice"},
		"data": "fa:stop:" + strconv.FormatInt(turn, 10),
	}})
	return b
}

// TestConversationNew: /new gives the chat a fresh session: the next
// message runs in another session, without the earlier transcript.
func TestConversationNew(t *testing.T) {
	t.Parallel()
	s := newTelegramStack(t, newEnv(t))
	s.startWorker()
	user := s.user
	s.send(privateUpdate(user, 1, "my secret word is banana"))
	waitFor(t, time.Minute, "the first answer", func() bool { _, ok := s.chatTurn(user, 1, 0); return ok })
	// The message was marked taken, then answered: once each.
	waitFor(t, time.Minute, "the reactions", func() bool { return reactions(s.fake, user, 1) == "👀 👌" })
	s.send(privateUpdate(user, 2, "/new"))
	waitFor(t, time.Minute, "the /new answer", func() bool {
		r := repliesTo(s.fake, user, 2)
		return len(r) == 1 && strings.Contains(r[0].Text, "fresh session")
	})
	s.send(privateUpdate(user, 3, "what is my secret word?"))
	waitFor(t, time.Minute, "the answer in the fresh session", func() bool { _, ok := s.chatTurn(user, 3, 1); return ok })
	if _, ok := s.chatTurn(user, 3, 0); ok {
		t.Errorf("the message after /new ran in the old session")
	}
	for _, r := range s.e.kit.Model.Requests() {
		if !strings.Contains(r.LastUserText(), "what is my secret word") {
			continue
		}
		for _, m := range r.Messages {
			if strings.Contains(fmt.Sprint(m), "banana") {
				t.Errorf("the fresh session's model call carries the earlier transcript: %v", m)
			}
		}
	}
	// /status and /help answer, about the fresh session.
	s.send(privateUpdate(user, 4, "/status"))
	s.send(privateUpdate(user, 5, "/help"))
	answered := wait.Until(time.Minute, func() bool {
		st, help := repliesTo(s.fake, user, 4), repliesTo(s.fake, user, 5)
		return len(st) == 1 && strings.Contains(st[0].Text, "Nothing is running. Nothing is waiting.") && strings.Contains(st[0].Text, "Turns: 1.") &&
			len(help) == 1 && strings.Contains(help[0].Text, "/stop") && strings.Contains(help[0].Text, "/new")
	})
	if !answered {
		t.Fatalf("waited 1m0s for the /status and /help answers; /status got %+v, /help got %+v, the chat's messages: %+v",
			repliesTo(s.fake, user, 4), repliesTo(s.fake, user, 5), s.fake.Messages(user))
	}
	if n := s.e.kit.Model.Count(); n != 2 {
		t.Errorf("model calls = %d, want 2: commands are never turns", n)
	}
	c := strconv.FormatInt(user, 10)
	if !s.exists(workflows.WorkflowID(workflows.ChatSession(telegram.Kind, c, "") + "~1")) {
		t.Errorf("no fresh session workflow")
	}
	t.Cleanup(func() {
		_ = s.e.client.TerminateWorkflow(context.Background(), workflows.WorkflowID(workflows.ChatSession(telegram.Kind, c, "")+"~1"), "", "test over")
	})
}

// TestInvokeWhileBusy: POST /invoke with whileBusy reject is 409
// turn_running while a turn runs, starting nothing; interrupt aborts the
// running turn and answers; steer streams the running turn, which reads
// the text.
func TestInvokeWhileBusy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker()
	hs := e.ingress()
	session := e.session("while-busy-http")
	post := func(ctx context.Context, key string, body map[string]any) (*http.Response, error) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/invoke", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		return http.DefaultClient.Do(req)
	}
	hold := make(chan struct{})
	e.kit.Model.EnqueueFor("the long one", modelserver.Reply{Text: []string{"long"}, Hold: hold})
	// The first turn runs in the background; its client keeps reading.
	first := make(chan string, 1)
	go func() {
		resp, err := post(context.Background(), "k1", map[string]any{"session": session, "text": "the long one"})
		if err != nil {
			first <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		first <- string(b)
	}()
	waitFor(t, time.Minute, "the first turn's model call", func() bool { return modelSaw(e.kit.Model, "the long one") })

	resp, err := post(context.Background(), "k2", map[string]any{"session": session, "text": "refuse me", "whileBusy": "reject"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), agent.CodeTurnRunning) {
		t.Errorf("reject while busy: %d %s, want 409 turn_running", resp.StatusCode, b)
	}
	resp, err = post(context.Background(), "k3", map[string]any{"session": session, "text": "x", "whileBusy": "sideways"})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an unknown whileBusy: %d, want 400", resp.StatusCode)
	}

	resp, err = post(context.Background(), "k4", map[string]any{"session": session, "text": "do this instead", "whileBusy": "interrupt"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"type":"completed"`) {
		t.Errorf("interrupt: %d %s, want the new turn completed", resp.StatusCode, b)
	}
	select {
	case got := <-first:
		if !strings.Contains(got, agent.CodeAborted) {
			t.Errorf("the interrupted turn's stream: %s, want aborted", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("the interrupted turn's stream never ended")
	}
	close(hold)
	if modelSaw(e.kit.Model, "refuse me") {
		t.Errorf("the refused turn reached the model")
	}

	// Steer: a turn whose tool runs (held) reads the text after the tool;
	// the steering request streams that turn.
	hold2 := e.kit.Counter.Hold("held")
	e.kit.Model.EnqueueFor("another long one", modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "call_held", Name: "counter", Args: `{"note":"held"}`}}})
	go func() {
		resp, err := post(context.Background(), "k5", map[string]any{"session": session, "text": "another long one"})
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}()
	waitFor(t, time.Minute, "the third turn's tool", func() bool { return e.kit.Counter.Started(session) == 1 })
	steered := make(chan *http.Response, 1)
	go func() {
		resp, err := post(context.Background(), "k6", map[string]any{"session": session, "text": "and mention whales", "whileBusy": "steer"})
		if err == nil {
			steered <- resp
		}
	}()
	var v workflows.SessionView
	waitFor(t, time.Minute, "the steering message taken", func() bool {
		v, err = e.agent.State(context.Background(), session)
		return err == nil && v.Steering == 1
	})
	hold2()
	select {
	case resp := <-steered:
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.Header.Get("Idempotency-Key") != "k5" || !strings.Contains(string(b), `"type":"completed"`) {
			t.Errorf("steer: key %q, body %s; want the running turn k5's stream", resp.Header.Get("Idempotency-Key"), b)
		}
	case <-time.After(time.Minute):
		t.Fatal("the steering request never answered")
	}
	if !modelSaw(e.kit.Model, "and mention whales") {
		t.Errorf("the model never read the steering text")
	}

	// Too late to steer: the text comes while the turn's last model step
	// runs (its answer may be out). It runs as a turn of its own, which
	// the request streams: its answer is not lost.
	hold3 := make(chan struct{})
	e.kit.Model.EnqueueFor("a last long one", modelserver.Reply{Text: []string{"last"}, Hold: hold3})
	go func() {
		resp, err := post(context.Background(), "k7", map[string]any{"session": session, "text": "a last long one"})
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}()
	waitFor(t, time.Minute, "the fourth turn's model call", func() bool { return modelSaw(e.kit.Model, "a last long one") })
	late := make(chan *http.Response, 1)
	go func() {
		resp, err := post(context.Background(), "k8", map[string]any{"session": session, "text": "and mention dolphins", "whileBusy": "steer"})
		if err == nil {
			late <- resp
		}
	}()
	waitFor(t, time.Minute, "the late message queued as a turn", func() bool {
		v, err = e.agent.State(context.Background(), session)
		return err == nil && slices.Contains(v.Queued, "k8")
	})
	if v.Steering != 0 {
		t.Errorf("the late message steered the ending turn (%d steering)", v.Steering)
	}
	close(hold3)
	select {
	case resp := <-late:
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.Header.Get("Fastagent-Steered") != "" || resp.Header.Get("Idempotency-Key") != "k8" || !strings.Contains(string(b), `"type":"completed"`) {
			t.Errorf("late steer: steered %q, key %q, body %s; want its own turn k8 completed", resp.Header.Get("Fastagent-Steered"), resp.Header.Get("Idempotency-Key"), b)
		}
	case <-time.After(time.Minute):
		t.Fatal("the late steering request never answered")
	}
	if !modelSaw(e.kit.Model, "and mention dolphins") {
		t.Errorf("the model never read the late message")
	}
}

// reactions lists the reactions the bot set on message id in chat, in
// order, space-separated.
func reactions(fake *faketelegram.Server, chat, id int64) string {
	var out []string
	for _, c := range fake.Calls("setMessageReaction") {
		if fmt.Sprint(c.Params["chat_id"]) != strconv.FormatInt(chat, 10) || fmt.Sprint(c.Params["message_id"]) != strconv.FormatInt(id, 10) {
			continue
		}
		rs, _ := c.Params["reaction"].([]any)
		for _, r := range rs {
			if m, ok := r.(map[string]any); ok {
				out = append(out, fmt.Sprint(m["emoji"]))
			}
		}
	}
	return strings.Join(out, " ")
}

// TestGitHubCommands: on an issue, "@bot /stop" stops the running turn; a
// second /stop answers that nothing runs; /status answers; none is a turn.
func TestGitHubCommands(t *testing.T) {
	t.Parallel()
	s := newGitHubStack(t, newEnv(t))
	s.startWorker()
	session := s.session(7)
	t.Cleanup(func() { (&slackStack{e: s.e}).terminate(session) })
	comment := func(text string) []byte {
		return bytes.ReplaceAll(s.payload("issue_comment.json", 7), []byte("@fastagent-bot where is the typo, exactly?"), []byte(text))
	}
	hold := make(chan struct{})
	defer close(hold)
	s.e.kit.Model.EnqueueFor("write a long essay", modelserver.Reply{Text: []string{"Once"}, Hold: hold})
	first := comment("@fastagent-bot write a long essay")
	if code := s.post("issue_comment", "d1", githubSecret, first); code != http.StatusAccepted {
		t.Fatalf("comment: status %d", code)
	}
	waitFor(t, time.Minute, "the turn's model call", func() bool { return modelSaw(s.e.kit.Model, "write a long essay") })
	for i, text := range []string{"@fastagent-bot /stop", "@fastagent-bot  /stop ", "@fastagent-bot /status"} {
		if code := s.post("issue_comment", fmt.Sprintf("d%d", i+2), githubSecret, comment(text)); code != http.StatusAccepted {
			t.Fatalf("command %q: status %d", text, code)
		}
		if i == 0 {
			waitFor(t, time.Minute, "the turn aborted", func() bool {
				r, err := s.e.kit.Store.Turn(context.Background(), session, "github:"+github.BodyID(first)+":0")
				var out agentloop.Outcome
				return err == nil && json.Unmarshal(r.Outcome, &out) == nil && out.Code == agent.CodeAborted
			})
		}
	}
	waitFor(t, time.Minute, "the answers", func() bool {
		nothing, status := 0, 0
		for _, c := range s.fake.Comments(s.repo, 7) {
			if strings.Contains(c.Body, activities.NothingRunningText) {
				nothing++
			}
			if strings.Contains(c.Body, "Nothing is running. Nothing is waiting.") {
				status++
			}
		}
		return nothing == 1 && status == 1
	})
	if n := s.e.kit.Model.Count(); n != 1 {
		t.Errorf("model calls = %d: commands are never turns", n)
	}
}
