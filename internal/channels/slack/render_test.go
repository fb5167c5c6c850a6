package slack_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	goslack "github.com/slack-go/slack"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/wire"
)

const (
	team    = "T061EG9R6"
	channel = "C0LAN2Q65"
	thread  = "1515449522.000016"
	user    = "U061F7AUR"
)

// replier returns a replier on a new fake with no throttling, so every
// Show that has something new calls Slack.
func replier(t *testing.T) (*slack.Replier, *fakeslack.Server) {
	t.Helper()
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	r := slack.NewReplier("xoxb-test", fake.APIURL())
	r.EditEvery, r.AppendEvery = 0, 0
	return r, fake
}

func target(threadTS string) wire.Target {
	data, _ := json.Marshal(map[string]string{"team": team})
	return wire.Target{Chat: team + ":" + channel, Thread: threadTS, Message: thread, User: user, Data: data}
}

func open(t *testing.T, r *slack.Replier, tg wire.Target, ref string) channels.Render {
	t.Helper()
	rd, err := r.Render(context.Background(), tg, ref)
	if err != nil {
		t.Fatalf("Render(%q): %v", ref, err)
	}
	return rd
}

// step applies ev to v and shows it.
func step(t *testing.T, rd channels.Render, v *channels.View, ev agent.Event) {
	t.Helper()
	v.Apply(ev)
	if err := rd.Show(context.Background(), v); err != nil {
		t.Fatalf("Show after %s: %v", ev.Type, err)
	}
}

func text(s string, stepN int) agent.Event {
	return agent.Event{Type: agent.TypeText, Delta: s, Step: stepN}
}

func tsOf(ref string) string {
	_, ts, _ := strings.Cut(ref, ":")
	return ts
}

// onlyMessage returns the one message the fake holds, failing otherwise.
func onlyMessage(t *testing.T, fake *fakeslack.Server) fakeslack.Message {
	t.Helper()
	var ms []fakeslack.Message
	for _, m := range fake.Messages("") {
		if !isControl(m.Blocks) {
			ms = append(ms, m)
		}
	}
	if len(ms) != 1 {
		t.Fatalf("messages = %+v, want exactly one", ms)
	}
	return ms[0]
}

// isControl reports whether blocks are the Stop button's own message
// (posted under a stream, deleted when the turn ends).
func isControl(blocks string) bool {
	return strings.Contains(blocks, "fastagent_stop") && !strings.Contains(blocks, `"section"`)
}

// replyCalls are the calls of methods, without the posts of the Stop
// button's own message.
func replyCalls(fake *fakeslack.Server, methods ...string) []fakeslack.Call {
	var out []fakeslack.Call
	for _, c := range fake.Calls(methods...) {
		if c.Method == "chat.postMessage" && isControl(c.Get("blocks")) {
			continue
		}
		out = append(out, c)
	}
	return out
}

func TestRenderStream(t *testing.T) {
	t.Parallel()
	r, fake := replier(t)
	rd := open(t, r, target(thread), "")
	var v channels.View
	step(t, rd, &v, agent.Event{Type: agent.TypeThinking, Delta: "secret chain of thought"})
	if n := len(replyCalls(fake, "chat.startStream", "chat.postMessage")); n != 0 || rd.Ref() != "" {
		t.Fatalf("while thinking: %d messages, ref %q; want none", n, rd.Ref())
	}
	step(t, rd, &v, text("Hello", 1))
	step(t, rd, &v, text(" world", 1))
	step(t, rd, &v, agent.Event{Type: agent.TypeToolStarted, ID: "call_1", Name: "search", Args: json.RawMessage(`{"q":"tool-arg-secret"}`)})
	step(t, rd, &v, agent.Event{Type: agent.TypeToolEnded, ID: "call_1", Name: "search", Content: "result"})
	step(t, rd, &v, text("Done.", 2))
	final := "Hello world\n\nDone."
	if err := rd.Finish(context.Background(), final); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if err := rd.Finish(context.Background(), final); err != nil {
		t.Fatalf("Finish again: %v", err)
	}

	var statuses []string
	for _, st := range fake.Statuses() {
		if st.Thread != thread || st.Channel != channel {
			t.Errorf("status %+v, want it in the thread", st)
		}
		statuses = append(statuses, st.Status)
	}
	// Thinking, the tool, thinking again, cleared once finished (the
	// second Finish changes nothing).
	if want := []string{slack.ThinkingStatus, "is running search…", slack.ThinkingStatus, ""}; strings.Join(statuses, "|") != strings.Join(want, "|") {
		t.Errorf("statuses = %q, want %q", statuses, want)
	}
	starts := fake.Calls("chat.startStream")
	if len(starts) != 1 {
		t.Fatalf("startStream calls = %d, want 1", len(starts))
	}
	s := starts[0]
	if s.Get("channel") != channel || s.Get("thread_ts") != thread || s.Get("recipient_team_id") != team ||
		s.Get("recipient_user_id") != user || s.Get("markdown_text") != "Hello" {
		t.Errorf("startStream params = %v", s.Params)
	}
	var appended []string
	for _, c := range fake.Calls("chat.appendStream") {
		appended = append(appended, c.Get("markdown_text")+c.Get("chunks"))
	}
	want := []string{
		" world",
		`[{"type":"task_update","id":"call_1","title":"search","status":"in_progress"}]`,
		`[{"type":"task_update","id":"call_1","title":"search","status":"complete"}]`,
		"\n\nDone.",
	}
	if strings.Join(appended, "|") != strings.Join(want, "|") {
		t.Errorf("appends = %q, want %q", appended, want)
	}
	if n := len(fake.Calls("chat.stopStream")); n != 1 {
		t.Errorf("stopStream calls = %d, want 1 (Finish is idempotent)", n)
	}
	if n := len(replyCalls(fake, "chat.update", "chat.postMessage")); n != 0 {
		t.Errorf("%d update/post calls, want none: the stream already shows the answer", n)
	}
	m := onlyMessage(t, fake)
	if m.Text != final || m.Streaming || !m.Stream || m.Thread != thread || rd.Ref() != "stream:"+m.TS {
		t.Errorf("message = %+v ref %q, want the stopped stream showing %q", m, rd.Ref(), final)
	}
	if len(m.Tasks) != 2 || m.Tasks[1].Status != "complete" {
		t.Errorf("tasks = %+v", m.Tasks)
	}
	for _, c := range fake.Calls() {
		if strings.Contains(string(c.Raw), "secret") {
			t.Errorf("%s carried thinking or tool arguments: %s", c.Method, c.Raw)
		}
	}
}

// Channel.Reply settles a streamed reply in a new renderer built from the
// stored ref: it stops the stream and sets the message to the answer,
// never posting a second one.
func TestRenderFinishFromStoredRef(t *testing.T) {
	t.Parallel()
	r, fake := replier(t)
	rd := open(t, r, target(thread), "")
	var v channels.View
	step(t, rd, &v, text("partial", 1))
	ref := rd.Ref()
	final := "partial answer, complete"
	for i := 0; i < 2; i++ { // a retried reply
		if err := open(t, r, target(thread), ref).Finish(context.Background(), final); err != nil {
			t.Fatalf("Finish %d: %v", i, err)
		}
	}
	m := onlyMessage(t, fake)
	if m.Text != final || m.Streaming {
		t.Errorf("message = %+v, want %q, stream stopped", m, final)
	}
	if u := fake.Calls("chat.update"); len(u) == 0 || u[0].Get("markdown_text") != final {
		t.Errorf("updates = %+v, want markdown_text %q", u, final)
	}
	if n := len(replyCalls(fake, "chat.postMessage")); n != 0 {
		t.Errorf("postMessage calls = %d, want 0", n)
	}
}

func TestRenderFallback(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		thread string
		refuse string // startStream's ok:false error
	}{
		{"top level, no thread", "", ""},
		{"stream not allowed", thread, "not_allowed"},
		{"missing scope", thread, "missing_scope"},
		{"unknown method", thread, "unknown_method"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, fake := replier(t)
			if c.refuse != "" {
				fake.Fail("chat.startStream", fakeslack.Failure{Error: c.refuse})
			}
			rd := open(t, r, target(c.thread), "")
			var v channels.View
			step(t, rd, &v, text("one", 1))
			step(t, rd, &v, text(" two", 1))
			if err := rd.Finish(context.Background(), "one two three"); err != nil {
				t.Fatalf("Finish: %v", err)
			}
			m := onlyMessage(t, fake)
			if m.Stream || m.Text != "one two three" || m.Thread != c.thread || rd.Ref() != "msg:"+m.TS {
				t.Errorf("message = %+v ref %q", m, rd.Ref())
			}
			if n := len(replyCalls(fake, "chat.postMessage")); n != 1 {
				t.Errorf("postMessage calls = %d, want 1", n)
			}
			if n := len(fake.Calls("chat.update")); n != 2 {
				t.Errorf("update calls = %d, want 2 (the second delta, the answer)", n)
			}
			if n := len(fake.Calls("chat.appendStream", "chat.stopStream")); n != 0 {
				t.Errorf("%d stream calls after the fallback", n)
			}
		})
	}
}

// A Channel.Stream attempt resumed after a crash continues the stored
// reply: never a second message, final text equal to the answer.
func TestRenderResume(t *testing.T) {
	t.Parallel()
	events := []agent.Event{text("Hello", 1), text(" world", 1), text(" again", 1)}
	final := "Hello world again"
	cases := []struct {
		name string
		// first is how the crashed attempt left things.
		first  func(t *testing.T, r *slack.Replier) string
		stream bool
	}{
		{"open stream", func(t *testing.T, r *slack.Replier) string {
			rd := open(t, r, target(thread), "")
			var v channels.View
			step(t, rd, &v, events[0])
			step(t, rd, &v, events[1])
			return rd.Ref()
		}, true},
		{"message", func(t *testing.T, r *slack.Replier) string {
			rd := open(t, r, target(""), "")
			var v channels.View
			step(t, rd, &v, events[0])
			return rd.Ref()
		}, false},
		{"message, bare ts ref", func(t *testing.T, r *slack.Replier) string {
			rd := open(t, r, target(""), "")
			var v channels.View
			step(t, rd, &v, events[0])
			return tsOf(rd.Ref())
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, fake := replier(t)
			ref := c.first(t, r)
			tg := target("")
			if c.stream {
				tg = target(thread)
			}
			rd := open(t, r, tg, ref)
			var v channels.View
			for _, ev := range events { // the feed replays from the start
				step(t, rd, &v, ev)
			}
			// Live, the reply never shows repeated text.
			if m := onlyMessage(t, fake); !strings.HasPrefix(final, m.Text) {
				t.Errorf("live text %q is not a prefix of %q", m.Text, final)
			}
			if err := rd.Finish(context.Background(), final); err != nil {
				t.Fatalf("Finish: %v", err)
			}
			m := onlyMessage(t, fake)
			if m.Text != final || m.Streaming || tsOf(rd.Ref()) != m.TS {
				t.Errorf("message = %+v ref %q, want %q", m, rd.Ref(), final)
			}
			if n := len(replyCalls(fake, "chat.startStream", "chat.postMessage")); n != 1 {
				t.Errorf("%d start/post calls, want 1", n)
			}
		})
	}
}

func TestRenderBadRef(t *testing.T) {
	t.Parallel()
	r, _ := replier(t)
	for _, ref := range []string{"card:1.2", "stream:", "msg:"} {
		if _, err := r.Render(context.Background(), target(thread), ref); err == nil {
			t.Errorf("Render(%q) = nil error, want one", ref)
		}
	}
	if _, err := r.Render(context.Background(), wire.Target{Chat: "no-channel"}, ""); err == nil {
		t.Error("Render with a bad chat = nil error")
	}
}

// A 429 is honoured: Show skips Slack until Retry-After has passed, Finish
// waits it out and succeeds.
func TestRenderRateLimited(t *testing.T) {
	t.Parallel()
	r, fake := replier(t)
	rd := open(t, r, target(thread), "")
	var v channels.View
	step(t, rd, &v, text("Hello", 1))
	fake.Fail("chat.appendStream", fakeslack.Failure{Status: 429, RetryAfter: 1})
	v.Apply(text(" world", 1))
	var rl *goslack.RateLimitedError
	if err := rd.Show(context.Background(), &v); !errors.As(err, &rl) {
		t.Fatalf("Show = %v, want a rate limit", err)
	}
	v.Apply(text(" and more", 1))
	if err := rd.Show(context.Background(), &v); err != nil {
		t.Fatalf("Show while limited: %v", err)
	}
	if n := len(fake.Calls("chat.appendStream")); n != 1 {
		t.Errorf("appendStream calls = %d, want 1 (none while limited)", n)
	}
	fake.Fail("chat.stopStream", fakeslack.Failure{Status: 429, RetryAfter: 1})
	final := "Hello world and more"
	if err := rd.Finish(context.Background(), final); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if n := len(fake.Calls("chat.stopStream")); n != 2 {
		t.Errorf("stopStream calls = %d, want 2 (limited, then done)", n)
	}
	if m := onlyMessage(t, fake); m.Text != final || m.Streaming {
		t.Errorf("message = %+v, want %q", m, final)
	}
}

// A retried step takes back streamed text: appends stop and Finish sets
// the message to the stored answer.
func TestRenderRetryShrink(t *testing.T) {
	t.Parallel()
	r, fake := replier(t)
	rd := open(t, r, target(thread), "")
	var v channels.View
	step(t, rd, &v, text("The answer is 4", 1))
	step(t, rd, &v, agent.Event{Type: agent.TypeRetrying, Step: 1})
	step(t, rd, &v, text("The answer", 1))
	step(t, rd, &v, text(" is 42", 1))
	final := "The answer is 42"
	if err := rd.Finish(context.Background(), final); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if n := len(fake.Calls("chat.appendStream")); n != 0 {
		t.Errorf("appendStream calls = %d after the shrink, want 0", n)
	}
	if m := onlyMessage(t, fake); m.Text != final || m.Streaming {
		t.Errorf("message = %+v, want %q", m, final)
	}
}

// Texts beyond Slack's limits: stream calls are split at 12,000
// characters; a message is cut at about 40,000 with a note.
func TestRenderLongText(t *testing.T) {
	t.Parallel()
	r, fake := replier(t)
	rd := open(t, r, target(thread), "")
	var v channels.View
	long := strings.Repeat("é", 13000)
	step(t, rd, &v, text(long, 1))
	if err := rd.Finish(context.Background(), long); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if m := onlyMessage(t, fake); m.Text != long || len(fake.Calls("chat.appendStream")) != 1 {
		t.Errorf("streamed %d chars in %d appends, want %d in 1", utf8.RuneCountInString(m.Text), len(fake.Calls("chat.appendStream")), 13000)
	}

	r2, fake2 := replier(t)
	huge := strings.Repeat("x", 50000)
	if err := open(t, r2, target(""), "").Finish(context.Background(), huge); err != nil {
		t.Fatalf("Finish huge: %v", err)
	}
	m := onlyMessage(t, fake2)
	if n := utf8.RuneCountInString(m.Text); n > 40000 || !strings.HasSuffix(m.Text, "one Slack message can hold.)_") {
		t.Errorf("huge answer posted as %d chars ending %q", n, m.Text[len(m.Text)-40:])
	}
}

// The assistant status is a courtesy: an app without the scope streams
// all the same.
func TestRenderStatusRefused(t *testing.T) {
	t.Parallel()
	r, fake := replier(t)
	fake.Fail("assistant.threads.setStatus", fakeslack.Failure{Error: "missing_scope"})
	rd := open(t, r, target(thread), "")
	var v channels.View
	step(t, rd, &v, agent.Event{Type: agent.TypeThinking, Delta: "hm"})
	step(t, rd, &v, text("hi", 1))
	if err := rd.Finish(context.Background(), "hi"); err != nil {
		t.Fatal(err)
	}
	if m := onlyMessage(t, fake); !m.Stream || m.Text != "hi" {
		t.Errorf("message = %+v", m)
	}
}

// React marks the answered message: :eyes: when taken, :white_check_mark:
// when answered; the same reaction again (a retry) is no error.
func TestReact(t *testing.T) {
	t.Parallel()
	r, fake := replier(t)
	ctx := context.Background()
	for _, stage := range []string{channels.ReactTaken, channels.ReactTaken, channels.ReactAnswered} {
		if err := r.React(ctx, target(thread), stage); err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
	}
	var got []string
	for _, c := range fake.Calls("reactions.add") {
		if c.Get("channel") != channel || c.Get("timestamp") != thread {
			t.Errorf("reaction on %s/%s", c.Get("channel"), c.Get("timestamp"))
		}
		got = append(got, c.Get("name"))
	}
	if strings.Join(got, ",") != "eyes,eyes,white_check_mark" {
		t.Errorf("reactions %v", got)
	}
	if err := r.React(ctx, wire.Target{Chat: team + ":" + channel}, channels.ReactTaken); err == nil {
		t.Error("a target without a message: no error")
	}
}
