package feishu_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
	"github.com/fastagent/fastagent/internal/wire"
)

func pngBytes(t *testing.T, side int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, side, side))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFetchFiles: an image becomes vision input, a file is saved under
// inbox/feishu (mode 0600, name made safe) with its path in the text; an
// image past the prompt's image budget is saved as a file.
func TestFetchFiles(t *testing.T) {
	t.Parallel()
	r, fake := newReplier(t)
	img := pngBytes(t, 4)
	notes := []byte("meeting at noon\n")
	fake.AddResource(userMsg, "img_v3_01", fakefeishu.Resource{Type: "image", Data: img})
	fake.AddResource(userMsg, "img_v3_02", fakefeishu.Resource{Type: "image", Data: img})
	fake.AddResource(userMsg, "file_v3_01", fakefeishu.Resource{Type: "file", Name: "../../etc/passwd notes.txt", Data: notes})
	r.Files.MaxImagesBytes = int64(len(img)) // room for one image
	dir := t.TempDir()
	tg := target("")
	tg.Attachments = []wire.Attachment{
		{ID: "img_v3_01", Name: "img_v3_01", Mime: feishu.MimeImage},
		{ID: "img_v3_02", Name: "img_v3_02", Mime: feishu.MimeImage},
		{ID: "file_v3_01", Name: "notes.txt"},
	}
	p, err := r.Fetch(context.Background(), tg, agent.Prompt{Text: "look"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Images) != 1 || p.Images[0].MimeType != "image/png" || p.Images[0].Data != base64.StdEncoding.EncodeToString(img) {
		t.Errorf("images = %d, want the first image as vision input", len(p.Images))
	}
	const saved = "inbox/feishu/file_v3_01-etc_passwd_notes.txt"
	for _, want := range []string{"look\n\n", "[image attached: img_v3_01", "[file saved at inbox/feishu/img_v3_02-img_v3_02: img_v3_02", "[file saved at " + saved} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("text %q lacks %q", p.Text, want)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(saved)))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved file: %v, %v; want mode 0600", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(saved))); !bytes.Equal(b, notes) {
		t.Errorf("saved %q, want %q", b, notes)
	}
	for _, c := range fake.Calls("im.resource") {
		if !strings.Contains(c.Path, "/open-apis/im/v1/messages/"+userMsg+"/resources/") || !strings.Contains(c.Path, "type=") {
			t.Errorf("resource call %s: want the message's resource with a type", c.Path)
		}
	}
}

// TestFetchRefuses: a file over maxFileBytes, one the platform does not
// have, and a slow download fail with a clear error; the first two are
// permanent, the timeout is retried.
func TestFetchRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		limits    channels.FileLimits
		delay     time.Duration
		key       string
		want      string
		permanent bool
	}{
		{"over the cap", channels.FileLimits{MaxFileBytes: 1024}, 0, "file_big", "over the 1.0KB limit", true},
		{"unknown key", channels.FileLimits{}, 0, "file_nope", "code 234003", true},
		{"timeout", channels.FileLimits{Timeout: 200 * time.Millisecond}, 2 * time.Second, "file_big", "timed out after 200ms", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, fake := newReplier(t)
			fake.AddResource(userMsg, "file_big", fakefeishu.Resource{Type: "file", Name: "big.bin", Data: bytes.Repeat([]byte("x"), 4096)})
			if c.delay > 0 {
				fake.Delay("im.resource", c.delay)
			}
			r.Files = c.limits
			tg := target("")
			tg.Attachments = []wire.Attachment{{ID: c.key, Name: "big.bin"}}
			dir := t.TempDir()
			p, err := r.Fetch(context.Background(), tg, agent.Prompt{Text: "hi"}, dir)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.key) {
				t.Fatalf("Fetch error %v, want one naming %s and %q", err, c.key, c.want)
			}
			if channels.IsPermanent(err) != c.permanent {
				t.Errorf("permanent = %v, want %v", channels.IsPermanent(err), c.permanent)
			}
			if p.Text != "hi" || len(p.Images) != 0 {
				t.Errorf("prompt changed on failure: %+v", p)
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "inbox", "feishu")); len(ents) != 0 {
				t.Errorf("a refused file was saved: %v", ents)
			}
		})
	}
}

// TestFetchParent: a reply-summon loads its parent message — its text
// leads the prompt as primary input and its image is fetched from the
// parent's resources.
func TestFetchParent(t *testing.T) {
	t.Parallel()
	r, fake := newReplier(t)
	img := pngBytes(t, 2)
	const parent = "om_parent00000000000000000000000001"
	fake.AddUserMessage(fakefeishu.UserMessage{ID: parent, MsgType: "post",
		Content:  `{"title":"Q3 plan","content":[[{"tag":"text","text":"ship by "},{"tag":"at","user_id":"@_user_1"}],[{"tag":"img","image_key":"img_parent"}]]}`,
		Mentions: []fakefeishu.Mention{{Key: "@_user_1", OpenID: "ou_alice", Name: "Alice"}}})
	fake.AddResource(parent, "img_parent", fakefeishu.Resource{Type: "image", Data: img})
	tg := target("")
	tg.Attachments = []wire.Attachment{{ID: parent, Name: "replied-to message", Mime: feishu.MimeParent}}
	p, err := r.Fetch(context.Background(), tg, agent.Prompt{Text: "is this realistic?"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := "The message this replies to (primary input):\nQ3 plan\nship by @Alice\n\nThe reply addressed to you:\nis this realistic?\n\n[image attached: img_parent"
	if !strings.HasPrefix(p.Text, want) {
		t.Errorf("text %q, want it to start with %q", p.Text, want)
	}
	if len(p.Images) != 1 {
		t.Errorf("images = %d, want the parent's image", len(p.Images))
	}
	// An unknown parent is a permanent failure naming it.
	tg.Attachments[0].ID = "om_gone"
	if _, err := r.Fetch(context.Background(), tg, agent.Prompt{Text: "?"}, ""); err == nil || !channels.IsPermanent(err) || !strings.Contains(err.Error(), "om_gone") {
		t.Errorf("unknown parent: %v, want a permanent error naming it", err)
	}
}

// TestFetchParentOnly: "@bot" alone as a reply gives the parent's text as
// the whole prompt; a bot card parent shows its visible text.
func TestFetchParentOnly(t *testing.T) {
	t.Parallel()
	r, fake := newReplier(t)
	fake.AddUserMessage(fakefeishu.UserMessage{ID: "om_card", MsgType: "interactive", SenderType: "app",
		Content: `{"title":"","elements":[[{"tag":"text","text":"The answer is 42."}]]}`})
	tg := target("")
	tg.Attachments = []wire.Attachment{{ID: "om_card", Mime: feishu.MimeParent}}
	p, err := r.Fetch(context.Background(), tg, agent.Prompt{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := "The message this replies to (primary input):\n[sent by an app]\nThe answer is 42."; p.Text != want {
		t.Errorf("text %q, want %q", p.Text, want)
	}
}
