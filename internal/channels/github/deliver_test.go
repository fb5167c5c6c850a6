package github

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/testsupport/fakegithub"
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

// TestDeliverComment: send_message to github:o/r#5 is one marked comment;
// a send whose reference was lost (a new store) finds the comment by its
// marker instead of posting again; a text file is a comment with its text
// in a code block, a binary file is refused for good, saying why.
func TestDeliverComment(t *testing.T) {
	t.Parallel()
	f := fake(t)
	r := tokenReplier(t, f)
	senders := delivery.Senders{}
	senders.Add(r)
	ctx := context.Background()
	tg, err := delivery.ParseTarget("github:o/r#5")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := delivery.Deliver(ctx, senders, refStore(t), tg, "s", "send/e1", "nightly build is red", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := delivery.Deliver(ctx, senders, refStore(t), tg, "s", "send/e1", "nightly build is red", nil); err != nil {
		t.Fatal(err)
	}
	cs := f.Comments("o/r", 5)
	if len(cs) != 1 || !strings.HasPrefix(cs[0].Body, "nightly build is red\n\n<!-- fastagent:turn="+delivery.Mark("s", "send/e1")) {
		t.Fatalf("comments = %+v, want one marked", cs)
	}
	if n := len(f.Calls("comment.create")); n != 1 {
		t.Errorf("comment.create called %d times", n)
	}

	st := refStore(t)
	file := &delivery.File{Name: "notes.md", Data: []byte("one ``` two\n")}
	if _, err := delivery.Deliver(ctx, senders, st, tg, "s", "send/e2", "", file); err != nil {
		t.Fatal(err)
	}
	cs = f.Comments("o/r", 5)
	if len(cs) != 2 || !strings.Contains(cs[1].Body, "**notes.md** (12B)\n\n````\none ``` two\n````") {
		t.Fatalf("file comment = %+v", cs)
	}
	_, err = delivery.Deliver(ctx, senders, st, tg, "s", "send/e3", "", &delivery.File{Name: "a.png", Data: []byte{0x89, 'P', 'N', 'G', 0, 0xff}})
	if !delivery.IsPermanent(err) || !strings.Contains(err.Error(), "not a text file") {
		t.Errorf("binary file: %v", err)
	}
	if n := len(f.Comments("o/r", 5)); n != 2 {
		t.Errorf("%d comments after a refused file, want 2", n)
	}
}

var _ = fakegithub.Comment{}
