package slack_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/wire"
)

const botToken = "xoxb-files-test"

// pngBytes is a small real PNG image.
func pngBytes(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{R: 255, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// evilServer counts the requests it gets: a refused download must never
// reach it (the bot token would go with it).
func evilServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("stolen"))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func newFake(t *testing.T) (*fakeslack.Server, *slack.Replier) {
	t.Helper()
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	return fake, slack.NewReplier(botToken, fake.APIURL())
}

func fileTarget(ids ...string) wire.Target {
	t := wire.Target{Chat: "T1:D1", Thread: "1700000000.000100"}
	for _, id := range ids {
		t.Attachments = append(t.Attachments, wire.Attachment{ID: id})
	}
	return t
}

// TestFetchImageAndFile: an image becomes vision input, any other file is
// saved (0600) under inbox/slack with its path in the prompt; downloads
// carry the bot token.
func TestFetchImageAndFile(t *testing.T) {
	t.Parallel()
	fake, rp := newFake(t)
	img := pngBytes(t)
	fake.AddFile(fakeslack.File{ID: "F0IMG", Name: "photo.png", Mimetype: "image/png", Data: img})
	fake.AddFile(fakeslack.File{ID: "F0TXT", Name: "notes.txt", Mimetype: "text/plain", Data: []byte("hello notes\n")})
	// Declared an image, but its bytes are text: saved as a file.
	fake.AddFile(fakeslack.File{ID: "F0FAKE", Name: "fake.png", Mimetype: "image/png", Data: []byte("not an image")})
	dir := t.TempDir()

	p, err := rp.Fetch(context.Background(), fileTarget("F0IMG", "F0TXT", "F0FAKE"), agent.Prompt{Text: "look at these"}, dir)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if len(p.Images) != 1 || p.Images[0].MimeType != "image/png" || p.Images[0].Data != base64.StdEncoding.EncodeToString(img) {
		t.Errorf("images = %+v, want the PNG", p.Images)
	}
	for _, want := range []string{"look at these", "[image attached: photo.png",
		"[file saved at inbox/slack/F0TXT-notes.txt: notes.txt, 12B]", "[file saved at inbox/slack/F0FAKE-fake.png: fake.png"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("prompt text %q lacks %q", p.Text, want)
		}
	}
	saved := filepath.Join(dir, "inbox", "slack", "F0TXT-notes.txt")
	b, err := os.ReadFile(saved)
	if err != nil || string(b) != "hello notes\n" {
		t.Fatalf("saved file = %q, %v", b, err)
	}
	if st, _ := os.Stat(saved); st.Mode().Perm() != 0o600 {
		t.Errorf("saved file mode = %v, want 0600", st.Mode().Perm())
	}
	downloads := fake.Downloads()
	if len(downloads) != 3 {
		t.Fatalf("downloads = %+v, want 3", downloads)
	}
	for _, d := range downloads {
		if d.Authorization != "Bearer "+botToken {
			t.Errorf("download of %s: Authorization %q, want the bot token", d.FileID, d.Authorization)
		}
	}
	if n := len(fake.Calls("files.info")); n != 3 {
		t.Errorf("files.info calls = %d, want 3", n)
	}
}

// TestFetchImageBudget: images past the per-image cap or the prompt's
// image budget (Temporal's payload limit) are saved as files instead.
func TestFetchImageBudget(t *testing.T) {
	t.Parallel()
	fake, rp := newFake(t)
	img := pngBytes(t)
	rp.Files.MaxImagesBytes = int64(len(img)) // room for one
	fake.AddFile(fakeslack.File{ID: "F1", Name: "a.png", Data: img})
	fake.AddFile(fakeslack.File{ID: "F2", Name: "b.png", Data: img})
	dir := t.TempDir()
	p, err := rp.Fetch(context.Background(), fileTarget("F1", "F2"), agent.Prompt{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Images) != 1 || !strings.Contains(p.Text, "[file saved at inbox/slack/F2-b.png: b.png") {
		t.Errorf("got %d images and text %q; want a.png as image, b.png saved", len(p.Images), p.Text)
	}

	fake2, rp2 := newFake(t)
	rp2.Files.MaxImageBytes = int64(len(img)) - 1
	fake2.AddFile(fakeslack.File{ID: "F3", Name: "big.png", Data: img})
	p, err = rp2.Fetch(context.Background(), fileTarget("F3"), agent.Prompt{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Images) != 0 || !strings.Contains(p.Text, "inbox/slack/F3-big.png") {
		t.Errorf("an image over the per-image cap: %d images, text %q; want it saved", len(p.Images), p.Text)
	}
}

// TestFetchRefused: a download host outside Slack, a redirect to one, a
// file over the size cap (declared or actual), a stalled download and an
// unknown file fail the Fetch with an error naming the file; the token
// never reaches another host and nothing is saved.
func TestFetchRefused(t *testing.T) {
	t.Parallel()
	evil, hits := evilServer(t)
	cases := []struct {
		name      string
		file      fakeslack.File
		limits    slack.FileLimits
		want      string
		permanent bool
	}{
		{"evil host", fakeslack.File{Name: "x.txt", Data: []byte("x"), URL: evil.URL + "/x.txt"},
			slack.FileLimits{}, "is not a Slack file host", true},
		{"evil https host", fakeslack.File{Name: "x.txt", Data: []byte("x"), URL: "https://files.slack.com.evil.example/x.txt"},
			slack.FileLimits{}, "is not a Slack file host", true},
		{"redirect to evil host", fakeslack.File{Name: "x.txt", Data: []byte("x"), RedirectTo: evil.URL + "/x.txt"},
			slack.FileLimits{}, "redirected to " + strings.TrimPrefix(evil.URL, "http://") + ", not a Slack file host", true},
		{"declared size over cap", fakeslack.File{Name: "big.bin", Data: []byte("x"), Size: 21 << 20},
			slack.FileLimits{}, "over the 20.0MB limit", true},
		{"actual size over cap", fakeslack.File{Name: "big.bin", Data: bytes.Repeat([]byte("x"), 2048), Size: 10},
			slack.FileLimits{MaxFileBytes: 1024}, "over the 1.0KB limit", true},
		{"stalled download", fakeslack.File{Name: "slow.bin", Data: []byte("x"), Stall: true},
			slack.FileLimits{Timeout: 300 * time.Millisecond}, "timed out after 300ms", false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake, rp := newFake(t)
			rp.Files = c.limits
			c.file.ID = "FBAD" + string(rune('A'+i))
			fake.AddFile(c.file)
			dir := t.TempDir()
			in := agent.Prompt{Text: "hi"}
			_, err := rp.Fetch(context.Background(), fileTarget(c.file.ID), in, dir)
			if err == nil {
				t.Fatal("Fetch succeeded, want an error")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.file.Name) {
				t.Errorf("error %q: want it to name %s and say %q", err, c.file.Name, c.want)
			}
			if channels.IsPermanent(err) != c.permanent {
				t.Errorf("permanent = %v, want %v (%v)", channels.IsPermanent(err), c.permanent, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "inbox")); !os.IsNotExist(err) {
				t.Errorf("something was saved (%v)", err)
			}
		})
	}
	t.Run("unknown file", func(t *testing.T) {
		t.Parallel()
		_, rp := newFake(t)
		_, err := rp.Fetch(context.Background(), fileTarget("FNOPE"), agent.Prompt{Text: "hi"}, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "FNOPE") || !strings.Contains(err.Error(), "file_not_found") || !channels.IsPermanent(err) {
			t.Errorf("error = %v, want a permanent file_not_found naming FNOPE", err)
		}
	})
	t.Cleanup(func() {
		if n := hits.Load(); n != 0 {
			t.Errorf("the evil host received %d requests", n)
		}
	})
}

// TestFetchSafePaths: a hostile file name cannot leave inbox/slack, and a
// symbolic link planted at inbox is not followed.
func TestFetchSafePaths(t *testing.T) {
	t.Parallel()
	fake, rp := newFake(t)
	fake.AddFile(fakeslack.File{ID: "F9", Name: "../../fastagent.yaml", Data: []byte("model: evil\n")})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fastagent.yaml"), []byte("model: good\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := rp.Fetch(context.Background(), fileTarget("F9"), agent.Prompt{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Text, "inbox/slack/F9-fastagent.yaml") {
		t.Errorf("prompt %q: want the sanitized path", p.Text)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "fastagent.yaml")); string(b) != "model: good\n" {
		t.Errorf("fastagent.yaml was overwritten: %q", b)
	}

	outside := t.TempDir()
	dir2 := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir2, "inbox")); err != nil {
		t.Fatal(err)
	}
	if _, err := rp.Fetch(context.Background(), fileTarget("F9"), agent.Prompt{}, dir2); err == nil {
		t.Error("Fetch through a symlinked inbox succeeded, want an error")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("files written through the symlink: %v", ents)
	}
}

func TestSafeFileName(t *testing.T) {
	t.Parallel()
	cases := []struct{ id, name, want string }{
		{"F1", "report.pdf", "F1-report.pdf"},
		{"F1", "../../etc/passwd", "F1-etc_passwd"},
		{"F1", ".env", "F1-env"},
		{"F1", "a/b\\c d.txt", "F1-a_b_c_d.txt"},
		{"F1", "", "F1-file"},
		{"F1", "..", "F1-file"},
		{"../F1", "x", "___F1-x"},
		{"", "x", "file-x"},
		{"F1", "résumé.pdf", "F1-r_sum_.pdf"},
		{"F1", strings.Repeat("a", 300) + ".txt", "F1-" + strings.Repeat("a", 96) + ".txt"},
	}
	for _, c := range cases {
		got := slack.SafeFileName(c.id, c.name)
		if got != c.want {
			t.Errorf("SafeFileName(%q, %q) = %q, want %q", c.id, c.name, got, c.want)
		}
		if strings.ContainsAny(got, `/\`) || strings.HasPrefix(got, ".") {
			t.Errorf("SafeFileName(%q, %q) = %q is not a plain name", c.id, c.name, got)
		}
	}
}

func TestFileHostAllowed(t *testing.T) {
	t.Parallel()
	rp := slack.NewReplier(botToken, "http://127.0.0.1:4567/api/")
	cases := []struct {
		url string
		ok  bool
	}{
		{"https://files.slack.com/files-pri/T1-F1/x.png", true},
		{"https://slack.com/x", true},
		{"https://a.slack-edge.com/x", true},
		{"https://FILES.SLACK.COM/x", true},
		{"http://files.slack.com/x", false},
		{"https://files.slack.com.evil.example/x", false},
		{"https://evilslack.com/x", false},
		{"https://user:pw@files.slack.com/x", false},
		{"http://127.0.0.1:4567/files-pri/x", true},
		{"http://127.0.0.1:4568/files-pri/x", false},
		{"https://127.0.0.1:4567/files-pri/x", false},
		{"http://localhost:4567/x", false},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := rp.FileHostAllowed(u); got != c.ok {
			t.Errorf("FileHostAllowed(%s) = %v, want %v", c.url, got, c.ok)
		}
	}
	if slack.NewReplier(botToken, "").FileHostAllowed(&url.URL{Scheme: "http", Host: "127.0.0.1:4567"}) {
		t.Error("without an API URL override, a loopback host is allowed")
	}
}

// TestDoorParseFiles: a file_share message carries its files by reference
// (ID, name, type, size), never their bytes or URLs.
func TestDoorParseFiles(t *testing.T) {
	t.Parallel()
	d := &slack.Door{SigningSecret: secret}
	got, err := d.Parse(channels.Request{Body: fixture(t, "message_im_files.json")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 1 {
		t.Fatalf("messages = %+v, want one", got.Messages)
	}
	want := []wire.Attachment{
		{ID: "F0IMG0001", Name: "photo.png", Mime: "image/png", Size: 5232},
		{ID: "F0TXT0002", Name: "notes.txt", Mime: "text/plain", Size: 12},
	}
	m := got.Messages[0]
	if m.Text != "what is in these?" || !m.Direct || len(m.Attachments) != len(want) {
		t.Fatalf("message = %+v", m)
	}
	for i := range want {
		if m.Attachments[i] != want[i] {
			t.Errorf("attachment %d = %+v, want %+v", i, m.Attachments[i], want[i])
		}
	}
}

// TestNewFileConfig: maxFileBytes bounds downloads (a negative value is
// refused) and the channel brings its slack_send_file tool.
func TestNewFileConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SLACK_SIGNING_SECRET": "s", "SLACK_BOT_TOKEN": "xoxb-1"}
	if _, err := slack.New([]byte("maxFileBytes: -1\n"), func(k string) string { return env[k] }); err == nil ||
		!strings.Contains(err.Error(), "maxFileBytes") {
		t.Errorf("negative maxFileBytes: error %v, want one naming the key", err)
	}
	ch, err := slack.New([]byte("maxFileBytes: 1048576\n"), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if rp := ch.Replier.(*slack.Replier); rp.Files.MaxFileBytes != 1<<20 {
		t.Errorf("MaxFileBytes = %d, want 1 MiB", rp.Files.MaxFileBytes)
	}
	if len(ch.Tools) != 1 || ch.Tools[0].Spec().Name != slack.SendFileName {
		t.Errorf("channel tools = %v, want %s", ch.Tools, slack.SendFileName)
	}
}
