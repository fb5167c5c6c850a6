package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// fakeReplier records posts and updates.
type fakeReplier struct {
	mu    sync.Mutex
	log   []string
	posts int
}

func (f *fakeReplier) Kind() string { return "fake" }

func (f *fakeReplier) Render(_ context.Context, _ wire.Target, ref string) (channels.Render, error) {
	return &fakeRender{f: f, ref: ref}, nil
}

type fakeRender struct {
	f   *fakeReplier
	ref string
}

func (r *fakeRender) Ref() string { return r.ref }

func (r *fakeRender) Show(ctx context.Context, v *channels.View) error {
	if v.Text() == "" {
		return nil
	}
	return r.Finish(ctx, v.Text())
}

func (r *fakeRender) Finish(_ context.Context, text string) error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if r.ref == "" {
		r.f.posts++
		r.ref = fmt.Sprintf("m%d", r.f.posts)
		r.f.log = append(r.f.log, "post "+r.ref+" "+text)
		return nil
	}
	r.f.log = append(r.f.log, "update "+r.ref+" "+text)
	return nil
}

// TestChannelReply: the stored answer is posted once; a retried reply
// updates the posted message; a busy notice never overwrites an answer; an
// unconfigured kind fails without retries.
func TestChannelReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	now := time.Now()
	entries := []transcript.Entry{
		{ID: "u1", Type: transcript.TypeMessage, Time: now, Message: &transcript.Message{Role: transcript.RoleUser, Text: "hi"}},
		{ID: "a1", ParentID: "u1", Type: transcript.TypeMessage, Time: now, Message: &transcript.Message{Role: transcript.RoleAssistant, Text: "Hello"}},
		{ID: "a2", ParentID: "a1", Type: transcript.TypeMessage, Time: now, Message: &transcript.Message{Role: transcript.RoleAssistant, Text: "there."}},
	}
	if err := st.Append(ctx, "s1", entries...); err != nil {
		t.Fatal(err)
	}
	fake := &fakeReplier{}
	r := activities.NewReplies(st, nil, []channels.Replier{fake}, nil)
	out := agentloop.Outcome{Turn: "k1", Status: agent.TypeCompleted, First: "u1", Leaf: "a2"}
	target := wire.ReplyTarget{Kind: "fake", Data: json.RawMessage(`{}`)}
	steps := []struct {
		name string
		in   wire.ReplyInput
		want []string
	}{
		{"first reply posts the stored answer", wire.ReplyInput{Session: "s1", Turn: "k1", Reply: target, Outcome: out},
			[]string{"post m1 Hello\n\nthere."}},
		{"retried reply updates it", wire.ReplyInput{Session: "s1", Turn: "k1", Reply: target, Outcome: out},
			[]string{"post m1 Hello\n\nthere.", "update m1 Hello\n\nthere."}},
		{"busy after an answer changes nothing", wire.ReplyInput{Session: "s1", Turn: "k1", Reply: target, Busy: true},
			[]string{"post m1 Hello\n\nthere.", "update m1 Hello\n\nthere."}},
		{"busy for a new key posts the notice", wire.ReplyInput{Session: "s1", Turn: "k2", Reply: target, Busy: true},
			[]string{"post m1 Hello\n\nthere.", "update m1 Hello\n\nthere.", "post m2 " + activities.BusyText}},
	}
	for _, s := range steps {
		if err := r.Reply(ctx, s.in); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if fmt.Sprint(fake.log) != fmt.Sprint(s.want) {
			t.Errorf("%s: calls %q, want %q", s.name, fake.log, s.want)
		}
	}
	err = r.Reply(ctx, wire.ReplyInput{Session: "s1", Turn: "k3", Reply: wire.ReplyTarget{Kind: "nope"}, Outcome: out})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.NonRetryable() {
		t.Errorf("unknown kind: %v, want a non-retryable application error", err)
	}
}

// bgFetchReplier is a fake channel whose files are fetched: "bad" cannot be
// read, any other becomes one vision image.
type bgFetchReplier struct{ fakeReplier }

func (f *bgFetchReplier) Fetch(_ context.Context, t wire.Target, p agent.Prompt, _ string) (agent.Prompt, error) {
	for _, a := range t.Attachments {
		if a.ID == "bad" {
			return p, fmt.Errorf("files.info %s: file_not_found", a.ID)
		}
		p.Images = append(p.Images, agent.Image{MimeType: "image/png", Data: "aW1n"})
		p.Text += "\n\n[image attached: " + a.Name + "]"
	}
	return p, nil
}

// TestChannelFetchBackground: files of the buffered discussion folded
// into a turn reach the model as background input; one that cannot be
// read is named and the turn goes on.
func TestChannelFetchBackground(t *testing.T) {
	t.Parallel()
	r := activities.NewReplies(nil, nil, []channels.Replier{&bgFetchReplier{}}, nil)
	data, err := json.Marshal(wire.Target{Chat: "c", Background: []wire.Attachment{
		{ID: "F1", Name: "chart.png"}, {ID: "bad", Name: "gone.pdf"}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Fetch(context.Background(), wire.FetchInput{Session: "s1", Turn: "k1",
		Reply: wire.ReplyTarget{Kind: "fake", Data: data}, Prompt: agent.Prompt{Text: "what do you make of it?"}})
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	equal := func(what string, got, want any) {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	equal("images", len(p.Images), 1)
	want := "what do you make of it?\n\nFiles shared in the discussion above (background, not addressed to you):\n" +
		"[image attached: chart.png]\n[file gone.pdf could not be read: files.info bad: file_not_found]"
	equal("text", p.Text, want)
}
