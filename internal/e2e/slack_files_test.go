package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/workflows"
)

// TestSlackFilesInAndOut: a DM with an image and a text file reaches the
// model as vision input plus the path the text file was saved at; the model
// sends a workspace file back with slack_send_file, which lands in the DM's
// thread through the external upload protocol; the answer is posted there.
func TestSlackFilesInAndOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	rp := slack.NewReplier("xoxb-e2e-files", fake.APIURL())
	e.kit.Loader.Extra = append(e.kit.Loader.Extra, rp.SendFileTool())
	door := httptest.NewServer(channels.Handler(&slack.Door{SigningSecret: "files-secret"}, e.client, e.queue, nil))
	t.Cleanup(door.Close)
	e.startWorker(withRepliers(rp))

	var buf bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	img.Set(2, 2, color.RGBA{G: 200, A: 255})
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	pngData := buf.Bytes()
	notes := []byte("meeting at noon\n")
	fake.AddFile(fakeslack.File{ID: "F0IMG0001", Name: "photo.png", Mimetype: "image/png", Data: pngData})
	fake.AddFile(fakeslack.File{ID: "F0TXT0002", Name: "notes.txt", Mimetype: "text/plain", Data: notes})
	const savedAt = "inbox/slack/F0TXT0002-notes.txt"
	e.kit.Model.EnqueueFor("what is in these files",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "call_send_1", Name: slack.SendFileName,
			Args: `{"path":"` + savedAt + `","title":"your notes","comment":"sending them back"}`}}},
		modelserver.Reply{Text: []string{"A green dot and ", "your notes."}})

	team := fmt.Sprintf("T%d", time.Now().UnixNano())
	const channel, ts = "D0FILES01", "1525215131.000002"
	session := slack.SessionID(team, channel, ts)
	t.Cleanup(func() {
		_ = e.client.TerminateWorkflow(context.Background(), workflows.WorkflowID(session), "", "test over")
	})
	body, _ := json.Marshal(map[string]any{
		"token": "ZZZZZZWSxiZZZ2yIvs3peJ", "team_id": team, "api_app_id": "A0MDYCDME", "type": "event_callback",
		"event_id": "EvFiles1", "event_time": 1525215131, "authed_users": []string{"U0LAN0Z89"},
		"authorizations": []map[string]any{{"team_id": team, "user_id": "U0LAN0Z89", "is_bot": true}},
		"event": map[string]any{"type": "message", "subtype": "file_share", "user": "U061F7AUR", "text": "what is in these files?",
			"ts": ts, "channel": channel, "event_ts": ts, "channel_type": "im",
			"files": []map[string]any{
				{"id": "F0IMG0001", "name": "photo.png", "mimetype": "image/png", "size": len(pngData)},
				{"id": "F0TXT0002", "name": "notes.txt", "mimetype": "text/plain", "size": len(notes)},
			}},
	})
	req, _ := http.NewRequest(http.MethodPost, door.URL+"/slack", bytes.NewReader(body))
	req.Header = slack.Sign("files-secret", time.Now(), body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /slack: %d", resp.StatusCode)
	}

	replied := func() bool {
		for _, m := range fake.Messages("") {
			if !m.Streaming && strings.Contains(m.Text, "your notes.") {
				return true
			}
		}
		return false
	}
	if !wait.Until(2*time.Minute, replied) {
		t.Fatalf("no reply; Slack calls: %+v; model requests: %d", fake.Calls(), e.kit.Model.Count())
	}

	// The model got the image as vision input and the saved file's path.
	reqs := e.kit.Model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model requests = %d, want 2 (tool call, answer)", len(reqs))
	}
	var user *modelserver.Message
	for i := range reqs[0].Messages {
		if reqs[0].Messages[i].Role == "user" {
			user = &reqs[0].Messages[i]
		}
	}
	if user == nil {
		t.Fatal("first model request has no user message")
	}
	wantImage := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngData)
	gotImage := false
	for _, p := range user.Parts {
		gotImage = gotImage || (p.Type == "image_url" && p.ImageURL == wantImage)
	}
	if !gotImage {
		t.Errorf("the model did not receive the image; parts: %d", len(user.Parts))
	}
	if !strings.Contains(user.Content, "what is in these files?") || !strings.Contains(user.Content, "[file saved at "+savedAt+": notes.txt") {
		t.Errorf("user text %q: want the message and the saved file's path", user.Content)
	}
	offered := false
	for _, tl := range reqs[0].Tools {
		offered = offered || tl.Name == slack.SendFileName
	}
	if !offered {
		t.Errorf("%s was not offered in a Slack session", slack.SendFileName)
	}
	if b, err := os.ReadFile(filepath.Join(e.kit.Dir, filepath.FromSlash(savedAt))); err != nil || !bytes.Equal(b, notes) {
		t.Errorf("saved file = %q, %v", b, err)
	}
	for _, d := range fake.Downloads() {
		if d.Authorization != "Bearer xoxb-e2e-files" {
			t.Errorf("download of %s without the bot token: %q", d.FileID, d.Authorization)
		}
	}

	// The file went back into the DM's thread with the external upload.
	ups := fake.Uploads()
	if len(ups) != 1 {
		t.Fatalf("uploads = %+v, want one", ups)
	}
	if u := ups[0]; !u.Completed || !bytes.Equal(u.Data, notes) || u.Channel != channel || u.Thread != ts ||
		u.Title != "your notes" || u.Comment != "sending them back" {
		t.Errorf("upload = %+v, want the notes in %s thread %s", u, channel, ts)
	}
	for _, c := range fake.Calls("chat.postMessage", "chat.startStream") {
		if c.Get("channel") != channel || c.Get("thread_ts") != ts {
			t.Errorf("reply posted to %s thread %q, want %s thread %s", c.Get("channel"), c.Get("thread_ts"), channel, ts)
		}
	}
}
