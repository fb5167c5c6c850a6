package feishu_test

import (
	"context"
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

// TestDeliver: a message to a chat is one card created with the send's
// uuid — sent again with its reference lost (a new store), the platform
// answers the same message; a file is uploaded and posted as a file
// message to a person; a refusal by the API is permanent, a rate limit
// is retried.
func TestDeliver(t *testing.T) {
	t.Parallel()
	rp, fake := newReplier(t)
	senders := delivery.Senders{}
	senders.Add(rp)
	ctx := context.Background()
	chat, err := delivery.ParseTarget("feishu:oc_84983ff6516d731e5b5f68d4ea2e1da5")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := delivery.Deliver(ctx, senders, refStore(t), chat, "s", "send/e1", "the nightly report", nil); err != nil {
			t.Fatal(err)
		}
	}
	msgs := fake.Messages()
	if len(msgs) != 1 || msgs[0].MsgType != "interactive" || !strings.Contains(msgs[0].Content, "the nightly report") ||
		msgs[0].ReceiveID != chat.Dest || msgs[0].ReceiveIDType != "chat_id" || !strings.HasPrefix(msgs[0].UUID, delivery.Mark("s", "send/e1")) {
		t.Fatalf("messages = %+v, want one card in the chat", msgs)
	}

	person, _ := delivery.ParseTarget("feishu:ou_7d8a6e6df7621556ce0d21922b676706")
	file := &delivery.File{Name: "report.csv", Data: []byte("a,b\n")}
	if _, err := delivery.Deliver(ctx, senders, refStore(t), person, "s", "send/f1", "", file); err != nil {
		t.Fatal(err)
	}
	ups := fake.Uploads()
	if len(ups) != 1 || ups[0].Name != "report.csv" || string(ups[0].Data) != "a,b\n" || ups[0].Type != "stream" {
		t.Fatalf("uploads = %+v", ups)
	}
	msgs = fake.Messages()
	if len(msgs) != 2 || msgs[1].MsgType != "file" || !strings.Contains(msgs[1].Content, ups[0].Key) || msgs[1].ReceiveIDType != "open_id" {
		t.Fatalf("file message = %+v", msgs)
	}

	fake.Fail("im.create", 230002)
	if _, err := delivery.Deliver(ctx, senders, refStore(t), chat, "s", "send/e2", "x", nil); !delivery.IsPermanent(err) {
		t.Errorf("bot not in chat: %v, want a permanent failure", err)
	}
	fake.Fail("im.create", 99991400)
	if _, err := delivery.Deliver(ctx, senders, refStore(t), chat, "s", "send/e3", "x", nil); err == nil || delivery.IsPermanent(err) {
		t.Errorf("rate limited: %v, want a retryable failure", err)
	}
}
