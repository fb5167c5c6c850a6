package feishu_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
	"github.com/fastagent/fastagent/workflows"
)

const userMsg = "om_p2p0000000000000000000000000001"

func newReplier(t *testing.T) (*feishu.Replier, *fakefeishu.Server) {
	t.Helper()
	fake := fakefeishu.New()
	t.Cleanup(fake.Close)
	p := feishu.Feishu()
	p.BaseURL = fake.URL
	r := feishu.NewReplier(p, "cli_test", "app-secret", nil)
	r.UpdateEvery, r.PatchEvery = 0, 0
	return r, fake
}

func target(thread string) workflows.Target {
	return workflows.Target{Chat: "oc_84983ff6516d731e5b5f68d4ea2e1da5", Thread: thread, Message: userMsg, User: "ou_user"}
}

// stream shows deltas one at a time and returns the view.
func stream(t *testing.T, rd channels.Render, v *channels.View, deltas ...string) {
	t.Helper()
	for _, d := range deltas {
		v.Apply(agent.Event{Type: agent.TypeText, Delta: d, Step: 1})
		if err := rd.Show(context.Background(), v); err != nil {
			t.Fatalf("Show: %v", err)
		}
	}
}

func render(t *testing.T, r *feishu.Replier, tg workflows.Target, ref string) channels.Render {
	t.Helper()
	rd, err := r.Render(context.Background(), tg, ref)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

// oneCardReply checks that exactly one message answers the user's message
// and shows final, settled (streaming closed), with increasing sequences.
func oneCardReply(t *testing.T, fake *fakefeishu.Server, final string, inThread bool) {
	t.Helper()
	msgs := fake.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages posted, want 1: %+v", len(msgs), msgs)
	}
	m := msgs[0]
	if m.ReplyTo != userMsg || m.InThread != inThread || m.MsgType != "interactive" || m.UUID == "" {
		t.Errorf("reply = %+v; want interactive, to %s, in thread %v, with a uuid", m, userMsg, inThread)
	}
	if got := fake.CardText(m); got != final {
		t.Errorf("final text %q, want %q", got, final)
	}
	for i := 1; i <= fake.Cards(); i++ {
		c, _ := fake.Card("card_fake" + string(rune('0'+i)))
		if c.Streaming {
			t.Errorf("card %s still streaming after Finish", c.ID)
		}
		for j := 1; j < len(c.Seqs); j++ {
			if c.Seqs[j] <= c.Seqs[j-1] {
				t.Errorf("card %s sequences not increasing: %v", c.ID, c.Seqs)
			}
		}
	}
}

func TestReplierStreamsOneCard(t *testing.T) {
	t.Parallel()
	r, fake := newReplier(t)
	rd := render(t, r, target(userMsg), "")
	var v channels.View
	stream(t, rd, &v, "The capital", " of France", " is Paris")
	if !strings.HasPrefix(rd.Ref(), "card:card_fake1:") || strings.Count(rd.Ref(), ":") != 3 {
		t.Errorf("Ref = %q, want a posted card reference", rd.Ref())
	}
	if c, _ := fake.Card("card_fake1"); !c.Streaming || c.Text != "The capital of France is Paris" || c.Updates < 1 {
		t.Errorf("live card = %+v, want streaming with the text so far", c)
	}
	final := "The capital of France is **Paris**."
	if err := rd.Finish(context.Background(), final); err != nil {
		t.Fatal(err)
	}
	if err := rd.Finish(context.Background(), final); err != nil {
		t.Fatal(err)
	}
	oneCardReply(t, fake, final, true)
	if n := fake.Cards(); n != 1 {
		t.Errorf("%d cards created, want 1", n)
	}
}

// TestReplierResumes: a later attempt (another activity, maybe another
// worker) continues the card an earlier one stored, never posting twice,
// whatever point the earlier one reached.
func TestReplierResumes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// before runs the first attempt and returns the ref it stored.
		before func(t *testing.T, r *feishu.Replier) string
	}{
		{"card posted", func(t *testing.T, r *feishu.Replier) string {
			rd := render(t, r, target(userMsg), "")
			var v channels.View
			stream(t, rd, &v, "one", " two")
			return rd.Ref()
		}},
		{"card created, not posted", func(t *testing.T, r *feishu.Replier) string {
			rd := render(t, r, target(userMsg), "")
			var v channels.View
			stream(t, rd, &v, "one")
			return rd.Ref()
		}},
		{"posted, but killed before the ref with the message was stored", func(t *testing.T, r *feishu.Replier) string {
			rd := render(t, r, target(userMsg), "")
			var v channels.View
			stream(t, rd, &v, "one")
			ref := rd.Ref()
			stream(t, rd, &v, " two")
			return ref
		}},
		{"nothing stored", func(*testing.T, *feishu.Replier) string { return "" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, fake := newReplier(t)
			ref := c.before(t, r)
			rd := render(t, r, target(userMsg), ref)
			var v channels.View
			stream(t, rd, &v, "one two three")
			if err := rd.Finish(context.Background(), "one two three four"); err != nil {
				t.Fatal(err)
			}
			oneCardReply(t, fake, "one two three four", true)
		})
	}
}

// TestReplierFinishWithoutStream: the reply activity alone (no live
// stream) posts the answer once, even when retried from scratch.
func TestReplierFinishWithoutStream(t *testing.T) {
	t.Parallel()
	r, fake := newReplier(t)
	for range 2 {
		if err := render(t, r, target(""), "").Finish(context.Background(), "Done."); err != nil {
			t.Fatal(err)
		}
	}
	oneCardReply(t, fake, "Done.", false)
	if n := len(fake.Calls("cardkit.create")); n != 0 {
		t.Errorf("%d cards created for a reply without a stream", n)
	}
}

// TestReplierDegrades: card creation fails → a card message patched in
// place; streaming closed mid-turn → the preview freezes and the settle
// still lands.
func TestReplierDegrades(t *testing.T) {
	t.Parallel()
	t.Run("card creation fails", func(t *testing.T) {
		t.Parallel()
		r, fake := newReplier(t)
		fake.Fail("cardkit.create", 99991672)
		rd := render(t, r, target(userMsg), "")
		var v channels.View
		stream(t, rd, &v, "partial", " answer")
		if !strings.HasPrefix(rd.Ref(), "msg:") {
			t.Errorf("Ref = %q, want a message reference", rd.Ref())
		}
		if err := rd.Finish(context.Background(), "final answer"); err != nil {
			t.Fatal(err)
		}
		oneCardReply(t, fake, "final answer", true)
		if m := fake.Messages()[0]; m.Patches < 2 {
			t.Errorf("card message patched %d times, want the live preview and the settle", m.Patches)
		}
	})
	t.Run("streaming closed mid-turn", func(t *testing.T) {
		t.Parallel()
		r, fake := newReplier(t)
		rd := render(t, r, target(userMsg), "")
		var v channels.View
		stream(t, rd, &v, "partial", " answer")
		fake.CloseStreaming("card_fake1")
		v.Apply(agent.Event{Type: agent.TypeText, Delta: " more", Step: 1})
		if err := rd.Show(context.Background(), &v); err == nil {
			t.Error("Show on a closed card succeeded")
		}
		if c, _ := fake.Card("card_fake1"); c.Text != "partial answer" {
			t.Errorf("frozen preview = %q", c.Text)
		}
		if err := rd.Finish(context.Background(), "partial answer more"); err != nil {
			t.Fatal(err)
		}
		oneCardReply(t, fake, "partial answer more", true)
	})
}

func TestReplierShowsWork(t *testing.T) {
	t.Parallel()
	r, fake := newReplier(t)
	rd := render(t, r, target(userMsg), "")
	var v channels.View
	v.Apply(agent.Event{Type: agent.TypeToolStarted, ID: "c1", Name: "bash"})
	if err := rd.Show(context.Background(), &v); err != nil {
		t.Fatal(err)
	}
	if c, _ := fake.Card("card_fake1"); !strings.Contains(c.Text, "`bash`") || !c.Streaming {
		t.Errorf("card before text = %+v, want the running tool shown", c)
	}
}

func TestReplierBadRef(t *testing.T) {
	t.Parallel()
	r, _ := newReplier(t)
	for _, ref := range []string{"card:", "card:c1:notanumber", "msg:", "slack:123", "card:c1:1:2:3"} {
		if _, err := r.Render(context.Background(), target(""), ref); err == nil {
			t.Errorf("Render(ref %q) accepted", ref)
		}
	}
	if _, err := r.Render(context.Background(), workflows.Target{Chat: "oc_1"}, ""); err == nil {
		t.Error("Render without a message accepted")
	}
}

func TestBotOpenIDFromAPI(t *testing.T) {
	t.Parallel()
	r, fake := newReplier(t)
	id, err := r.BotOpenID(context.Background())
	if err != nil || id != fake.BotOpenID {
		t.Fatalf("BotOpenID = %q, %v; want %q", id, err, fake.BotOpenID)
	}
}
