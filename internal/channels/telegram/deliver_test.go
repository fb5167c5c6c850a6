package telegram

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/store"
)

func refStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "sessions.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestDeliverMessage: a message goes to the chat as HTML, once however
// often the send is repeated; a send Telegram refused with an error is
// sent by the retry; a send whose answer never came is not sent again,
// and the failure says why.
func TestDeliverMessage(t *testing.T) {
	t.Parallel()
	rp, fake := newTestReplier(t)
	st := refStore(t)
	senders := delivery.Senders{}
	senders.Add(rp)
	ctx := context.Background()
	tg, err := delivery.ParseTarget("telegram:-1001234")
	if err != nil {
		t.Fatal(err)
	}
	fake.Fail("sendMessage", 1)
	if _, err := delivery.Deliver(ctx, senders, st, tg, "s", "send/e1", "**build** is green", nil); err == nil || delivery.IsPermanent(err) {
		t.Fatalf("first attempt = %v, want a retryable failure", err)
	}
	for range 2 {
		if _, err := delivery.Deliver(ctx, senders, st, tg, "s", "send/e1", "**build** is green", nil); err != nil {
			t.Fatal(err)
		}
	}
	msgs := fake.Messages(-1001234)
	if len(msgs) != 1 || msgs[0].Text != "<b>build</b> is green" || msgs[0].ParseMode != "HTML" {
		t.Fatalf("messages = %+v, want one", msgs)
	}

	fake.DropAnswer("sendMessage", 1)
	if _, err := delivery.Deliver(ctx, senders, st, tg, "s", "send/e2", "maybe twice?", nil); !delivery.IsPermanent(err) || !strings.Contains(err.Error(), "not sent again") {
		t.Fatalf("a send without an answer = %v, want a permanent failure saying it is not sent again", err)
	}
	if _, err := delivery.Deliver(ctx, senders, st, tg, "s", "send/e2", "maybe twice?", nil); !delivery.IsPermanent(err) {
		t.Fatalf("retry of a send without an answer = %v", err)
	}
	if msgs := fake.Messages(-1001234); len(msgs) != 2 {
		t.Errorf("messages = %+v, want the unanswered one once", msgs)
	}
}

// TestDeliverDocument: a file is one sendDocument into the chat.
func TestDeliverDocument(t *testing.T) {
	t.Parallel()
	rp, fake := newTestReplier(t)
	st := refStore(t)
	senders := delivery.Senders{}
	senders.Add(rp)
	tg, _ := delivery.ParseTarget("telegram:42")
	f := &delivery.File{Name: "report.csv", Data: []byte("a,b\n")}
	for range 2 {
		if _, err := delivery.Deliver(context.Background(), senders, st, tg, "s", "send/f1", "", f); err != nil {
			t.Fatal(err)
		}
	}
	msgs := fake.Messages(42)
	if len(msgs) != 1 || msgs[0].Document != "report.csv" || string(msgs[0].DocData) != "a,b\n" {
		t.Fatalf("messages = %+v, want the document once", msgs)
	}
}

// failingRefs fails the first SaveReply of a key with suffix, as a worker
// that dies after Telegram answered and before the message_id is kept.
type failingRefs struct {
	delivery.Refs
	suffix string
	failed bool
}

func (f *failingRefs) SaveReply(ctx context.Context, session, key, ref string) error {
	if !f.failed && strings.HasSuffix(key, f.suffix) {
		f.failed = true
		return errors.New("worker lost before the reference was kept")
	}
	return f.Refs.SaveReply(ctx, session, key, ref)
}

// TestDeliverNotTwiceAfterLostReference: a message Telegram took whose
// message_id was never kept (the worker died in between) is not sent again
// by the retry: the Bot API cannot be asked whether it arrived.
func TestDeliverNotTwiceAfterLostReference(t *testing.T) {
	t.Parallel()
	rp, fake := newTestReplier(t)
	refs := &failingRefs{Refs: refStore(t), suffix: "#part0"}
	senders := delivery.Senders{}
	senders.Add(rp)
	tg, _ := delivery.ParseTarget("telegram:42")
	ctx := context.Background()
	if _, err := delivery.Deliver(ctx, senders, refs, tg, "s", "send/e9", "once", nil); err == nil {
		t.Fatal("first attempt succeeded, want the lost reference's error")
	}
	_, err := delivery.Deliver(ctx, senders, refs, tg, "s", "send/e9", "once", nil)
	if !delivery.IsPermanent(err) {
		t.Errorf("retry = %v, want a permanent failure (the outcome is unknown)", err)
	}
	if msgs := fake.Messages(42); len(msgs) != 1 {
		t.Errorf("messages = %d, want 1", len(msgs))
	}
}
