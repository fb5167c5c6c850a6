package telegram

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/testsupport/faketelegram"
	"github.com/fastagent/fastagent/internal/wire"
)

const testToken = "7000000001:AAE2E-test-token"

func newTestReplier(t *testing.T) (*Replier, *faketelegram.Server) {
	t.Helper()
	fake := faketelegram.New(testToken)
	t.Cleanup(fake.Close)
	return NewReplier(NewAPI(fake.URL, testToken), nil), fake
}

func textView(s string) *channels.View {
	var v channels.View
	v.Apply(agent.Event{Type: agent.TypeText, Delta: s})
	return &v
}

func TestPreviewRateLimited(t *testing.T) {
	t.Parallel()
	r, fake := newTestReplier(t)
	r.EditEvery = 200 * time.Millisecond
	rd, err := r.Render(context.Background(), wire.Target{Chat: "424242", Message: "11"}, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	text := ""
	start := time.Now()
	deadline := start.Add(time.Second)
	for time.Now().Before(deadline) {
		text += "word "
		if err := rd.Show(ctx, textView(text)); err != nil {
			t.Fatal(err)
		}
		// Deliberate: a stream of previews paced over a second of wall
		// time (the replier has no clock seam) is what the rate limit caps.
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	sends, edits := fake.Calls("sendMessage"), fake.Calls("editMessageText")
	if len(sends) != 1 || len(edits) == 0 {
		t.Fatalf("%d sends, %d edits: want one preview edited", len(sends), len(edits))
	}
	// Each platform call takes a slot of EditEvery: at most one per slot.
	if max := int(elapsed/r.EditEvery) + 1; len(sends)+len(edits) > max {
		t.Errorf("%d calls in %s, want at most %d (one per %s)", len(sends)+len(edits), elapsed, max, r.EditEvery)
	}
	if rd.Ref() == "" {
		t.Error("no reference after the preview")
	}
	msgs := fake.Messages(424242)
	if len(msgs) != 1 || msgs[0].ReplyTo != 11 {
		t.Errorf("messages %+v: want one reply to 11", msgs)
	}
}

func TestPreviewHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	r, fake := newTestReplier(t)
	r.EditEvery = 0 // only retry_after holds edits back
	ctx := context.Background()
	rd, _ := r.Render(ctx, wire.Target{Chat: "5", Message: "1"}, "")
	if err := rd.Show(ctx, textView("a")); err != nil {
		t.Fatal(err)
	}
	fake.Throttle("editMessageText", 1, 1)
	if err := rd.Show(ctx, textView("ab")); err == nil || RetryAfter(err) != time.Second {
		t.Fatalf("Show under 429 = %v, want a retry_after of 1s", err)
	}
	throttledAt := time.Now()
	for time.Since(throttledAt) < 700*time.Millisecond {
		_ = rd.Show(ctx, textView("abc"+time.Now().String()))
		// Deliberate: previews keep coming during the retry_after window,
		// in wall time; none may reach the platform before it ends.
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(fake.Calls("editMessageText")); n != 1 {
		t.Errorf("%d edits within retry_after, want only the throttled one", n)
	}
	// Finish waits the 429 out instead of failing.
	fake.Throttle("editMessageText", 1, 1)
	start := time.Now()
	if err := rd.Finish(ctx, "done"); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("Finish returned after %s, before retry_after", waited)
	}
	if m := fake.Messages(5); len(m) != 1 || m[0].Text != "done" || m[0].ParseMode != "HTML" {
		t.Errorf("messages %+v", m)
	}
}

func TestFinishSplitsOnce(t *testing.T) {
	t.Parallel()
	r, fake := newTestReplier(t)
	ctx := context.Background()
	rd, _ := r.Render(ctx, wire.Target{Chat: "-100", Message: "7", Thread: "3"}, "")
	if err := rd.Show(ctx, textView("partial")); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for b.Len() < 9000 {
		b.WriteString("**Paris** is the capital of *France* & `fr`.\n")
	}
	answer := b.String()
	for i := 0; i < 2; i++ {
		if err := rd.Finish(ctx, answer); err != nil {
			t.Fatal(err)
		}
	}
	msgs := fake.Messages(-100)
	parts := Split(HTML(answer), MaxText)
	if len(parts) < 3 || len(msgs) != len(parts) {
		t.Fatalf("%d messages, %d parts", len(msgs), len(parts))
	}
	var got strings.Builder
	for i, m := range msgs {
		if m.Text != parts[i] || m.ParseMode != "HTML" || m.Thread != 3 {
			t.Errorf("message %d: %+v", i, m)
		}
		got.WriteString(Plain(m.Text))
	}
	if got.String() != Plain(HTML(answer)) {
		t.Error("the messages' text differs from the rendered answer")
	}
	if msgs[0].ReplyTo != 7 || msgs[0].Edits != 1 {
		t.Errorf("first message %+v: want the preview (reply to 7) edited once", msgs[0])
	}
	// A new attempt resumes from the stored reference: no new first message.
	rd2, err := r.Render(ctx, wire.Target{Chat: "-100", Message: "7"}, rd.Ref())
	if err != nil {
		t.Fatal(err)
	}
	if err := rd2.Finish(ctx, "short now"); err != nil {
		t.Fatal(err)
	}
	if msgs := fake.Messages(-100); msgs[0].Text != "short now" || len(fake.Calls("sendMessage")) != len(parts) {
		t.Errorf("resumed finish: first %q, %d sends", msgs[0].Text, len(fake.Calls("sendMessage")))
	}
}

func TestRenderRefusesBadTargets(t *testing.T) {
	t.Parallel()
	r, _ := newTestReplier(t)
	for _, c := range []struct {
		t   wire.Target
		ref string
	}{{wire.Target{Chat: "x", Message: "1"}, ""}, {wire.Target{Chat: "1"}, ""}, {wire.Target{Chat: "1", Message: "1"}, "msg:9"}} {
		if _, err := r.Render(context.Background(), c.t, c.ref); err == nil {
			t.Errorf("Render(%+v, %q) accepted", c.t, c.ref)
		}
	}
}

func TestFetch(t *testing.T) {
	t.Parallel()
	r, fake := newTestReplier(t)
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewRGBA(image.Rect(0, 0, 4, 4))); err != nil {
		t.Fatal(err)
	}
	fake.AddFile("photo-id", faketelegram.File{Path: "photos/file_1.jpg", Data: img.Bytes()})
	fake.AddFile("doc-id", faketelegram.File{Path: "documents/file_2.txt", Data: []byte("meeting notes: ship it\n")})
	dir := t.TempDir()
	target := wire.Target{Chat: "1", Message: "2", Attachments: []wire.Attachment{
		{ID: "photo-id", Name: "photo-u1.jpg", Mime: MimePhoto, Size: int64(img.Len())},
		{ID: "doc-id", Name: "notes.txt", Mime: "text/plain"}}}
	p, err := r.Fetch(context.Background(), target, agent.Prompt{Text: "look"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Images) != 1 || p.Images[0].MimeType != "image/png" {
		t.Errorf("images %+v, want the photo as vision input", p.Images)
	}
	if !strings.Contains(p.Text, "[file saved at inbox/telegram/") || !strings.Contains(p.Text, "notes.txt") {
		t.Errorf("prompt %q", p.Text)
	}
	saved, _ := filepath.Glob(filepath.Join(dir, "inbox", "telegram", "*notes.txt"))
	if len(saved) != 1 {
		t.Fatalf("saved %v", saved)
	}
	if b, _ := os.ReadFile(saved[0]); string(b) != "meeting notes: ship it\n" {
		t.Errorf("saved %q", b)
	}
	for _, c := range fake.Calls("") {
		if c.Token != testToken {
			t.Errorf("call %s with token %q", c.Method, c.Token)
		}
	}
	// Over the cap: refused before any download, permanently.
	r.Files.MaxFileBytes = 10
	_, err = r.Fetch(context.Background(), wire.Target{Chat: "1", Message: "2", Attachments: []wire.Attachment{{ID: "doc-id", Name: "notes.txt"}}}, agent.Prompt{}, dir)
	if err == nil || !channels.IsPermanent(err) || !strings.Contains(err.Error(), "maxFileBytes") {
		t.Errorf("over the cap: %v", err)
	}
	if _, err := r.Fetch(context.Background(), wire.Target{Chat: "1", Message: "2", Attachments: []wire.Attachment{{ID: "nope"}}}, agent.Prompt{}, dir); err == nil || !channels.IsPermanent(err) {
		t.Errorf("unknown file: %v", err)
	}
}

func TestErrorsHideToken(t *testing.T) {
	t.Parallel()
	api := NewAPI("http://127.0.0.1:1", testToken)
	err := api.Call(context.Background(), "getMe", struct{}{}, nil)
	if err == nil || strings.Contains(err.Error(), testToken) {
		t.Errorf("error %v: want one without the token", err)
	}
	if _, err := api.Download(context.Background(), "x", 10); err == nil || strings.Contains(err.Error(), testToken) {
		t.Errorf("download error %v: want one without the token", err)
	}
}

// TestFinishAfterPreviewDeleted: a preview that no longer exists (the
// user deleted it) is replaced by a new message with the answer.
func TestFinishAfterPreviewDeleted(t *testing.T) {
	t.Parallel()
	r, fake := newTestReplier(t)
	rd, err := r.Render(context.Background(), wire.Target{Chat: "8", Message: "1"}, "999")
	if err != nil {
		t.Fatal(err)
	}
	if err := rd.Finish(context.Background(), "answer"); err != nil {
		t.Fatal(err)
	}
	if m := fake.Messages(8); len(m) != 1 || m[0].Text != "answer" || rd.Ref() != "1001" {
		t.Errorf("messages %+v, ref %q", m, rd.Ref())
	}
}

// memRefs is an in-memory Refs.
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

// TestFinishRetriedSendsNoPartTwice: a reply retried by a new attempt
// (a new renderer from the stored reference) edits the split answer's
// later parts through their stored references instead of sending them
// again.
func TestFinishRetriedSendsNoPartTwice(t *testing.T) {
	t.Parallel()
	r, fake := newTestReplier(t)
	r.Refs = &memRefs{refs: map[string]string{}}
	ctx := context.Background()
	answer := strings.Repeat("a long line of the answer\n", 500)
	rd, _ := r.Render(ctx, wire.Target{Chat: "9", Message: "4"}, "")
	if err := rd.Finish(ctx, answer); err != nil {
		t.Fatal(err)
	}
	sends := len(fake.Calls("sendMessage"))
	if sends < 3 {
		t.Fatalf("%d sends for a long answer", sends)
	}
	rd2, _ := r.Render(ctx, wire.Target{Chat: "9", Message: "4"}, rd.Ref())
	if err := rd2.Finish(ctx, answer); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Calls("sendMessage")); n != sends {
		t.Errorf("the retried reply sent %d more messages", n-sends)
	}
	if n := len(fake.Messages(9)); n != sends {
		t.Errorf("%d messages, want %d", n, sends)
	}
}
