package slack_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	goslack "github.com/slack-go/slack"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
)

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func progress(line string) agent.Event {
	return agent.ToolProgress("c1", "bash", agent.Progress{Message: line})
}
func appendsOf(f *fakeslack.Server) []fakeslack.Call { return f.Calls("chat.appendStream") }

// taskDetails are the details of the task updates of a stream call.
func taskDetails(t *testing.T, c fakeslack.Call) []string {
	t.Helper()
	var chunks []struct{ Type, Status, Details string }
	if err := json.Unmarshal([]byte(c.Get("chunks")), &chunks); err != nil {
		t.Fatalf("chunks %q: %v", c.Get("chunks"), err)
	}
	var out []string
	for _, ch := range chunks {
		if ch.Type == "task_update" {
			out = append(out, ch.Details)
		}
	}
	return out
}

// A running tool's progress line changes often: updates that only change
// it go at most every DetailsEvery (3 s) per stream, the latest line
// winning; a status change goes at once.
func TestRenderThrottlesDetails(t *testing.T) {
	t.Parallel()
	r, fake := replier(t)
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	r.Now = c.now
	rd := open(t, r, target(thread), "")
	var v channels.View
	step(t, rd, &v, agent.ToolStarted("c1", "bash", nil)) // starts the stream with the task
	if n := len(fake.Calls("chat.startStream")); n != 1 {
		t.Fatalf("startStream calls = %d, want 1", n)
	}
	for i, line := range []string{"line 1", "line 2", "line 3"} {
		c.add(900 * time.Millisecond)
		step(t, rd, &v, progress(line))
		if n := len(appendsOf(fake)); n != 0 {
			t.Fatalf("after progress %d (%v in): %d appends, want none within 3 s", i+1, time.Duration(i+1)*900*time.Millisecond, n)
		}
	}
	c.add(400 * time.Millisecond) // 3.1 s after the last task update
	if err := rd.Show(context.Background(), &v); err != nil {
		t.Fatal(err)
	}
	a := appendsOf(fake)
	if len(a) != 1 {
		t.Fatalf("appends = %d after 3.1 s, want 1", len(a))
	}
	if d := taskDetails(t, a[0]); len(d) != 1 || d[0] != "line 3" {
		t.Errorf("details sent %q, want the latest line only", d)
	}
	// Unchanged: nothing more.
	c.add(time.Second)
	if err := rd.Show(context.Background(), &v); err != nil {
		t.Fatal(err)
	}
	if n := len(appendsOf(fake)); n != 1 {
		t.Errorf("appends = %d with nothing new, want 1", n)
	}
	// A status change goes at once.
	c.add(100 * time.Millisecond)
	step(t, rd, &v, progress("line 4"))
	c.add(100 * time.Millisecond)
	step(t, rd, &v, agent.ToolEnded("c1", false, "done"))
	a = appendsOf(fake)
	if len(a) != 2 {
		t.Fatalf("appends = %d after the tool ended, want 2 (the status change at once)", len(a))
	}
}

// A rate-limited stream update (429) waits for its Retry-After before the
// next one, whatever changes meanwhile.
func TestRenderDetailsHonourRetryAfter(t *testing.T) {
	t.Parallel()
	r, fake := replier(t)
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	r.Now = c.now
	rd := open(t, r, target(thread), "")
	var v channels.View
	step(t, rd, &v, agent.ToolStarted("c1", "bash", nil))
	fake.Fail("chat.appendStream", fakeslack.Failure{Status: 429, RetryAfter: 10})
	c.add(4 * time.Second)
	v.Apply(progress("line 1"))
	err := rd.Show(context.Background(), &v)
	var rl *goslack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != 10*time.Second {
		t.Fatalf("Show = %v, want the 429 with Retry-After 10 s", err)
	}
	for _, d := range []time.Duration{3 * time.Second, 4 * time.Second, 2 * time.Second} { // 9 s in
		c.add(d)
		step(t, rd, &v, progress("line at +"+d.String()))
	}
	step(t, rd, &v, agent.ToolEnded("c1", false, "done"))
	if n := len(appendsOf(fake)); n != 1 {
		t.Fatalf("appends = %d within Retry-After, want only the refused one", n)
	}
	c.add(1100 * time.Millisecond)
	if err := rd.Show(context.Background(), &v); err != nil {
		t.Fatal(err)
	}
	if n := len(appendsOf(fake)); n != 2 {
		t.Errorf("appends = %d once Retry-After passed, want 2", n)
	}
}

// Task details are text: &, < and > are escaped, so a tool's output
// never becomes a mention, a link or an entity.
func TestRenderEscapesTaskDetails(t *testing.T) {
	t.Parallel()
	r, fake := replier(t)
	r.DetailsEvery = 0
	rd := open(t, r, target(thread), "")
	var v channels.View
	step(t, rd, &v, agent.ToolStarted("c1", "bash", nil))
	step(t, rd, &v, progress("<!channel> a&b <@U123> <https://x|y>"))
	a := appendsOf(fake)
	if len(a) != 1 {
		t.Fatalf("appends = %d, want 1", len(a))
	}
	if d := taskDetails(t, a[0]); len(d) != 1 || d[0] != "&lt;!channel&gt; a&amp;b &lt;@U123&gt; &lt;https://x|y&gt;" {
		t.Errorf("details %q, want &, < and > escaped", d)
	}
	// Shown again unchanged: not sent again.
	step(t, rd, &v, agent.Event{Type: agent.TypeThinking, Delta: "x"})
	if n := len(appendsOf(fake)); n != 1 {
		t.Errorf("appends = %d, want 1: the escaped line was already sent", n)
	}
}

// A live message reply (top level, or a stream Slack refused) carries the
// Stop button under its text, bound to the turn's message and starter;
// the final text removes it (blocks=[]). A native stream cannot hold one:
// its button is a message of its own under the stream, deleted at the end,
// also by a renderer resumed from the stored reference.
func TestRenderStopButton(t *testing.T) {
	t.Parallel()
	t.Run("message", func(t *testing.T) {
		t.Parallel()
		r, fake := replier(t)
		rd := open(t, r, target(""), "")
		var v channels.View
		step(t, rd, &v, text("Hello", 1))
		m := onlyMessage(t, fake)
		if !strings.Contains(m.Blocks, `"action_id":"fastagent_stop"`) || !strings.Contains(m.Blocks, `"text":"Hello"`) {
			t.Fatalf("live message blocks %s, want its text and the Stop button", m.Blocks)
		}
		if !strings.Contains(m.Blocks, `\"u\":\"`+user+`\"`) || !strings.Contains(m.Blocks, `\"m\":\"`+thread+`\"`) {
			t.Errorf("Stop button %s, want it bound to the message and its starter", m.Blocks)
		}
		step(t, rd, &v, text(" world", 1))
		if err := rd.Finish(context.Background(), "Hello world"); err != nil {
			t.Fatal(err)
		}
		if m := onlyMessage(t, fake); m.Blocks != "[]" || m.Text != "Hello world" {
			t.Errorf("settled message %+v, want the text and no blocks", m)
		}
	})
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		r, fake := replier(t)
		rd := open(t, r, target(thread), "")
		var v channels.View
		step(t, rd, &v, text("Hello", 1))
		var control fakeslack.Message
		for _, m := range fake.Messages("") {
			if isControl(m.Blocks) {
				control = m
			}
		}
		if control.TS == "" || control.Thread != thread || !strings.Contains(rd.Ref(), "+"+control.TS) {
			t.Fatalf("messages %+v, ref %q: want the Stop button's message in the thread, in the reference", fake.Messages(""), rd.Ref())
		}
		// The final reply is settled by another renderer, from the ref.
		if err := open(t, r, target(thread), rd.Ref()).Finish(context.Background(), "Hello"); err != nil {
			t.Fatal(err)
		}
		if d := fake.Deleted(); len(d) != 1 || d[0].TS != control.TS {
			t.Errorf("deleted %+v, want the Stop button's message", d)
		}
		if m := onlyMessage(t, fake); m.Streaming || m.Text != "Hello" {
			t.Errorf("reply %+v, want the stopped stream", m)
		}
	})
}

// statusCalls are the assistant statuses sent, in order.
func statusCalls(fake *fakeslack.Server) []string {
	var out []string
	for _, st := range fake.Statuses() {
		out = append(out, st.Status)
	}
	return out
}

// A status call that fails without Slack's answer (an HTTP 503, as a
// network failure) is sent again at the next change; Slack refusing the
// method (not an AI app, missing scope) turns statuses off for the
// workspace, in every reply of the process; a refusal of one thread only
// stops that reply's.
func TestRenderStatusFailures(t *testing.T) {
	t.Parallel()
	running := agent.ToolStarted("c1", "bash", nil)
	t.Run("network", func(t *testing.T) {
		t.Parallel()
		r, fake := replier(t)
		fake.Fail("assistant.threads.setStatus", fakeslack.Failure{Status: 503})
		rd := open(t, r, target(thread), "")
		var v channels.View
		step(t, rd, &v, agent.Event{Type: agent.TypeThinking, Delta: "hm"}) // thinking: fails
		step(t, rd, &v, agent.Event{Type: agent.TypeThinking, Delta: "m"})  // no change: not sent again
		step(t, rd, &v, running)                                            // a change: sent
		if got := statusCalls(fake); strings.Join(got, "|") != slack.ThinkingStatus+"|is running bash…" {
			t.Errorf("statuses %q, want the failed thinking, then bash at the next change", got)
		}
	})
	t.Run("method refused", func(t *testing.T) {
		t.Parallel()
		r, fake := replier(t)
		fake.Fail("assistant.threads.setStatus", fakeslack.Failure{Error: "not_allowed"})
		rd := open(t, r, target(thread), "")
		var v channels.View
		step(t, rd, &v, agent.Event{Type: agent.TypeThinking, Delta: "hm"})
		step(t, rd, &v, running)
		if err := rd.Finish(context.Background(), "done"); err != nil {
			t.Fatal(err)
		}
		// Another reply in the same workspace, and the turn-start status.
		if err := r.React(context.Background(), target(thread), channels.ReactTaken); err != nil {
			t.Fatal(err)
		}
		rd2 := open(t, r, target(thread), "")
		var v2 channels.View
		step(t, rd2, &v2, running)
		if n := len(fake.Statuses()); n != 1 {
			t.Errorf("%d status calls, want only the refused one", n)
		}
	})
	t.Run("thread refused", func(t *testing.T) {
		t.Parallel()
		r, fake := replier(t)
		fake.Fail("assistant.threads.setStatus", fakeslack.Failure{Error: "invalid_thread_ts"})
		rd := open(t, r, target(thread), "")
		var v channels.View
		step(t, rd, &v, agent.Event{Type: agent.TypeThinking, Delta: "hm"})
		step(t, rd, &v, running)
		rd2 := open(t, r, target(thread), "")
		var v2 channels.View
		step(t, rd2, &v2, running)
		if got := statusCalls(fake); strings.Join(got, "|") != slack.ThinkingStatus+"|is running bash…" {
			t.Errorf("statuses %q, want the refused one, then only the other reply's", got)
		}
	})
}
