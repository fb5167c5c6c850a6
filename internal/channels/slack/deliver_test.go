package slack_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
)

// refStore is a session store on SQLite for the references of sends.
func refStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "sessions.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// failAfter makes the next call of method run and then answer an error:
// Slack carried it out, the caller cannot know.
func failAfter(fake *fakeslack.Server, method string) {
	once := true
	fake.Wrap(method, func(h fakeslack.Handler) fakeslack.Handler {
		return func(s *fakeslack.Server, c fakeslack.Call) map[string]any {
			out := h(s, c)
			if once {
				once = false
				return map[string]any{"ok": false, "error": "internal_error"}
			}
			return out
		}
	})
}

func deliveryTarget(t *testing.T, s string) delivery.Target {
	t.Helper()
	tg, err := delivery.ParseTarget(s)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// TestDeliverMessageOnce: a message to #ops goes to the channel found by
// name, marked; when Slack posts it but answers an error, the retry finds
// the marked message and settles it instead of posting a second one; a
// send already kept is not sent again.
func TestDeliverMessageOnce(t *testing.T) {
	t.Parallel()
	fake, rp := newFake(t)
	fake.AddChannel("C0OPS0001", "ops")
	fake.AddChannel("C0DEV0002", "dev")
	st := refStore(t)
	senders := delivery.Senders{}
	senders.Add(rp)
	ctx := context.Background()
	failAfter(fake, "chat.postMessage")
	if _, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:#ops"), "s1", "send/e1", "deploy done", nil); err == nil || delivery.IsPermanent(err) {
		t.Fatalf("first attempt = %v, want a retryable failure", err)
	}
	ref, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:#ops"), "s1", "send/e1", "deploy done", nil)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if _, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:#ops"), "s1", "send/e1", "deploy done", nil); err != nil {
		t.Fatal(err)
	}
	msgs := fake.Messages("C0OPS0001")
	if len(msgs) != 1 || msgs[0].Text != "deploy done" || msgs[0].Thread != "" || !strings.Contains(msgs[0].Metadata, delivery.Mark("s1", "send/e1")) {
		t.Fatalf("messages in #ops = %+v, want one marked", msgs)
	}
	if n := len(fake.Calls("chat.postMessage")); n != 1 {
		t.Errorf("chat.postMessage called %d times, want 1", n)
	}
	if ref != "C0OPS0001/"+msgs[0].TS {
		t.Errorf("ref = %q", ref)
	}
	if n := len(fake.Messages("")); n != 1 {
		t.Errorf("%d messages in all, want 1", n)
	}
}

// TestDeliverDestinations: a channel ID is used as it is, a user gets a
// direct message, and a channel name the app cannot see is refused for
// good.
func TestDeliverDestinations(t *testing.T) {
	t.Parallel()
	fake, rp := newFake(t)
	st := refStore(t)
	senders := delivery.Senders{}
	senders.Add(rp)
	ctx := context.Background()
	if _, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:C0ABC1234"), "s", "k1", "by id", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:U0ALICE01"), "s", "k2", "to you", nil); err != nil {
		t.Fatal(err)
	}
	if m := fake.Messages("C0ABC1234"); len(m) != 1 || m[0].Text != "by id" {
		t.Errorf("by ID: %+v", m)
	}
	if m := fake.Messages("D0ALICE01"); len(m) != 1 || m[0].Text != "to you" {
		t.Errorf("direct message: %+v", m)
	}
	_, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:#nope"), "s", "k3", "x", nil)
	if !delivery.IsPermanent(err) || !strings.Contains(err.Error(), "no channel named #nope") {
		t.Errorf("unknown channel: %v", err)
	}
	fake.Fail("chat.postMessage", fakeslack.Failure{Error: "not_in_channel"})
	if _, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:C0ABC1234"), "s", "k4", "x", nil); !delivery.IsPermanent(err) {
		t.Errorf("not_in_channel: %v, want a permanent failure", err)
	}
}

// TestDeliverFileOnce: a file goes up with the three external upload
// calls into the channel; when the completion is carried out but answers
// an error, the retry sees the file shared (files.info) and neither
// uploads nor completes it again.
func TestDeliverFileOnce(t *testing.T) {
	t.Parallel()
	fake, rp := newFake(t)
	fake.AddChannel("C0OPS0001", "ops")
	st := refStore(t)
	senders := delivery.Senders{}
	senders.Add(rp)
	ctx := context.Background()
	file := &delivery.File{Name: "report.csv", Data: []byte("a,b\n1,2\n")}
	failAfter(fake, "files.completeUploadExternal")
	if _, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:#ops"), "s", "send/f1", "", file); err == nil {
		t.Fatal("first attempt succeeded, want the injected failure")
	}
	ref, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:#ops"), "s", "send/f1", "", file)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	ups := fake.Uploads()
	if len(ups) != 1 || !ups[0].Completed || ups[0].Channel != "C0OPS0001" || string(ups[0].Data) != "a,b\n1,2\n" || ups[0].Filename != "report.csv" {
		t.Fatalf("uploads = %+v, want one shared in C0OPS0001", ups)
	}
	if n := len(fake.Calls("files.completeUploadExternal")); n != 1 {
		t.Errorf("files.completeUploadExternal called %d times, want 1", n)
	}
	if n := len(fake.Calls("files.getUploadURLExternal")); n != 1 {
		t.Errorf("files.getUploadURLExternal called %d times, want 1", n)
	}
	if ref != "C0OPS0001/file:"+ups[0].ID {
		t.Errorf("ref = %q", ref)
	}

	// An upload that stopped before its completion is finished by the
	// retry, still as one file.
	fake.Fail("files.completeUploadExternal", fakeslack.Failure{Error: "internal_error"})
	if _, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:#ops"), "s", "send/f2", "", file); err == nil {
		t.Fatal("want the injected failure")
	}
	if _, err := delivery.Deliver(ctx, senders, st, deliveryTarget(t, "slack:#ops"), "s", "send/f2", "", file); err != nil {
		t.Fatal(err)
	}
	if ups := fake.Uploads(); len(ups) != 2 || !ups[1].Completed {
		t.Errorf("uploads = %+v, want a second file, completed", ups)
	}
}
