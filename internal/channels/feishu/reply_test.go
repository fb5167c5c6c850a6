package feishu_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
	"github.com/fastagent/fastagent/internal/wire"
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

func target(thread string) wire.Target {
	return wire.Target{Chat: "oc_84983ff6516d731e5b5f68d4ea2e1da5", Thread: thread, Message: userMsg, User: "ou_user"}
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

func render(t *testing.T, r *feishu.Replier, tg wire.Target, ref string) channels.Render {
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
	if _, err := r.Render(context.Background(), wire.Target{Chat: "oc_1"}, ""); err == nil {
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

// longCJK is a 50,000-byte answer of CJK paragraphs (3 bytes a rune).
func longCJK() string {
	var b strings.Builder
	for i := 0; b.Len() < 50000; i++ {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(strings.Repeat("飞书卡片的长回答需要分段发送。", 10+i%7))
	}
	return b.String()
}

// answerParts returns the texts of the messages answering the user's
// message, in posting order.
func answerParts(t *testing.T, fake *fakefeishu.Server) []string {
	t.Helper()
	var out []string
	for _, m := range fake.Messages() {
		if m.ReplyTo != userMsg {
			t.Errorf("message %s replies to %q, want %s", m.ID, m.ReplyTo, userMsg)
		}
		out = append(out, fake.CardText(m))
	}
	return out
}

// TestReplierLongAnswerContinues: an answer longer than one card goes on
// in further card messages; their texts, in order, are exactly the stored
// answer (no byte lost or added, no rune split), and a retried reply posts
// no new message.
func TestReplierLongAnswerContinues(t *testing.T) {
	t.Parallel()
	final := longCJK()
	if len(final) < 50000 {
		t.Fatalf("answer is %d bytes", len(final))
	}
	for _, streamed := range []bool{true, false} {
		name := "reply only"
		if streamed {
			name = "streamed card"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, fake := newReplier(t)
			tg := target(userMsg)
			tg.Turn = "feishu:" + userMsg
			rd := render(t, r, tg, "")
			if streamed {
				var v channels.View
				stream(t, rd, &v, final[:30000], final[30000:])
			}
			if err := rd.Finish(context.Background(), final); err != nil {
				t.Fatal(err)
			}
			parts := answerParts(t, fake)
			if len(parts) < 3 {
				t.Fatalf("%d messages for a %d-byte answer, want 3 or more", len(parts), len(final))
			}
			for i, p := range parts {
				if !utf8.ValidString(p) || p == "" {
					t.Errorf("part %d is empty or not valid UTF-8", i+1)
				}
			}
			if got := strings.Join(parts, ""); got != final {
				t.Errorf("parts joined (%d bytes) differ from the stored answer (%d bytes)", len(got), len(final))
			}
			posted := len(fake.Messages())
			// A retried reply activity: a new renderer from the stored
			// reference settles the same messages.
			again := render(t, r, tg, rd.Ref())
			if err := again.Finish(context.Background(), final); err != nil {
				t.Fatal(err)
			}
			if n := len(fake.Messages()); n != posted {
				t.Errorf("the retried reply posted %d new messages", n-posted)
			}
			if got := strings.Join(answerParts(t, fake), ""); got != final {
				t.Error("after the retry the parts differ from the stored answer")
			}
		})
	}
}

// memRefs is an in-memory channels.Refs (first write wins, as the store).
type memRefs struct {
	mu   sync.Mutex
	refs map[string]string
}

func (m *memRefs) SaveReply(_ context.Context, session, turn, ref string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.refs[session+"|"+turn]; !ok {
		m.refs[session+"|"+turn] = ref
	}
	return nil
}

func (m *memRefs) Reply(_ context.Context, session, turn string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.refs[session+"|"+turn]; ok {
		return r, nil
	}
	return "", errors.New("not found")
}

// TestReplierLongAnswerStoredParts: the later parts' references are
// stored under the turn's key, and a retried reply patches those messages
// in place — it calls the reply API for none of them — while each part
// kept its own idempotency uuid.
func TestReplierLongAnswerStoredParts(t *testing.T) {
	t.Parallel()
	r, fake := newReplier(t)
	refs := &memRefs{refs: map[string]string{}}
	r.Refs = refs
	final := longCJK()
	tg := target(userMsg)
	tg.Turn = "feishu:" + userMsg
	rd := render(t, r, tg, "")
	if err := rd.Finish(context.Background(), final); err != nil {
		t.Fatal(err)
	}
	msgs := fake.Messages()
	uuids := map[string]bool{}
	for _, m := range msgs {
		uuids[m.UUID] = true
	}
	if len(uuids) != len(msgs) || len(msgs) < 3 {
		t.Fatalf("%d messages with %d distinct uuids, want one uuid per part (3 or more)", len(msgs), len(uuids))
	}
	for n := 2; n <= len(msgs); n++ {
		key := fmt.Sprintf("feishu:%s|feishu:%s#part%d", tg.Chat, userMsg, n)
		if got := refs.refs[key]; got != msgs[n-1].ID {
			t.Errorf("stored reference of part %d = %q, want %q", n, got, msgs[n-1].ID)
		}
	}
	replies := len(fake.Calls("im.reply"))
	patches := len(fake.Calls("im.patch"))
	again := render(t, r, tg, rd.Ref())
	if err := again.Finish(context.Background(), final); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Calls("im.reply")) - replies; n != 0 {
		t.Errorf("the retried reply called the reply API %d times", n)
	}
	if n := len(fake.Calls("im.patch")) - patches; n < len(msgs)-1 {
		t.Errorf("the retried reply patched %d part messages, want %d", n, len(msgs)-1)
	}
	if got := strings.Join(answerParts(t, fake), ""); got != final {
		t.Error("after the retry the parts differ from the stored answer")
	}
}
