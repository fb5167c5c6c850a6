package serve

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/wire"
)

// fakeStarter records Signal-With-Start calls.
type fakeStarter struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeStarter) SignalWithStartWorkflow(_ context.Context, id, signal string, arg interface{},
	_ client.StartWorkflowOptions, _ interface{}, _ ...interface{}) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := ""
	switch a := arg.(type) {
	case wire.Delivery:
		key = a.Key
	case wire.ChatMessage:
		key = a.ID
	}
	f.calls = append(f.calls, id+" "+signal+" "+key)
	return nil, nil
}

// TestWithChannels: the door is served without the API's bearer token (its
// signature authenticates it) and every other route still goes through h.
func TestWithChannels(t *testing.T) {
	t.Parallel()
	ch, err := slack.New(nil, func(k string) string {
		return map[string]string{"SLACK_SIGNING_SECRET": "sec", "SLACK_BOT_TOKEN": "xoxb"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &Parts{Config: Config{Logger: slog.Default()}, Channels: []*channels.Channel{ch}}
	guarded := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no token", http.StatusUnauthorized) })
	st := &fakeStarter{}
	srv := httptest.NewServer(p.WithChannels(guarded, st))
	t.Cleanup(srv.Close)
	body := []byte(`{"team_id":"T1","type":"event_callback","event_id":"Ev1","event":{"type":"app_mention","user":"U1","text":"<@UB> hi","ts":"1.000001","channel":"C1"},"authorizations":[{"user_id":"UB","is_bot":true}]}`)
	cases := []struct {
		name, method, path, secret string
		want                       int
	}{
		{"signed webhook", http.MethodPost, "/slack", "sec", http.StatusOK},
		{"unsigned webhook", http.MethodPost, "/slack", "wrong", http.StatusUnauthorized},
		{"API route keeps its auth", http.MethodGet, "/sessions/x", "sec", http.StatusUnauthorized},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, bytes.NewReader(body))
		req.Header = slack.Sign(c.secret, time.Now(), body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	want := []string{"chat:slack:T1:C1 " + wire.SignalChatMessage + " 1.000001"}
	if strings.Join(st.calls, ";") != strings.Join(want, ";") {
		t.Errorf("signal-with-start calls = %q, want %q", st.calls, want)
	}
}

// TestOpenBrokenChannel: an enabled channel without its secrets stops
// startup naming the file; a disabled one is ignored.
func TestOpenBrokenChannel(t *testing.T) {
	t.Parallel()
	cases := []struct{ file, wantErr string }{
		{"slack.yaml", "slack.yaml"},
		{"slack.yaml.disabled", ""},
	}
	for _, c := range cases {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "channels"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "channels", c.file), []byte("botTokenEnv: NOPE\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := Open(context.Background(), Config{Dir: dir, Getenv: func(string) string { return "" }})
		if c.wantErr == "" {
			if err != nil {
				t.Errorf("%s: Open: %v", c.file, err)
				continue
			}
			if len(p.Channels) != 0 {
				t.Errorf("%s: %d channels enabled, want none", c.file, len(p.Channels))
			}
			p.Close()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: Open error = %v, want one naming %s", c.file, err, c.wantErr)
			if p != nil {
				p.Close()
			}
		}
	}
}

// Open turns /invoke off when channel files exist, and http.invoke keeps it.
func TestOpenInvokeOffWithChannelFiles(t *testing.T) {
	for _, tc := range []struct {
		config string
		off    bool
	}{{"", true}, {"http:\n  invoke: true\n", false}} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "channels"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "channels", "slack.yaml"), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "fastagent.yaml"), []byte(tc.config), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := Open(context.Background(), Config{Dir: dir, Logger: slog.Default(), Getenv: func(k string) string {
			return map[string]string{"SLACK_SIGNING_SECRET": "sec", "SLACK_BOT_TOKEN": "xoxb"}[k]
		}})
		if err != nil {
			t.Fatal(err)
		}
		got := p.invokeOff
		p.Close()
		if got != tc.off {
			t.Errorf("config %q: invokeOff = %v, want %v", tc.config, got, tc.off)
		}
	}
}

// A Socket Mode channel mounts no webhook route: POST /slack falls through
// to the API handler (and its authentication), nothing is started.
func TestWithChannelsSocketNoRoute(t *testing.T) {
	t.Parallel()
	ch, err := slack.New([]byte("transport: socket\n"), func(k string) string {
		return map[string]string{"SLACK_BOT_TOKEN": "xoxb", "SLACK_APP_TOKEN": "xapp-1"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &Parts{Config: Config{Logger: slog.Default()}, Channels: []*channels.Channel{ch}}
	guarded := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no token", http.StatusUnauthorized) })
	st := &fakeStarter{}
	srv := httptest.NewServer(p.WithChannels(guarded, st))
	t.Cleanup(srv.Close)
	body := []byte(`{"team_id":"T1","type":"event_callback","event_id":"Ev1","event":{"type":"app_mention","user":"U1","text":"hi","ts":"1.000001","channel":"C1"}}`)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/slack", bytes.NewReader(body))
	req.Header = slack.Sign("", time.Now(), body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(st.calls) != 0 {
		t.Errorf("POST /slack = %d with %d hand-offs, want 401 from the API handler and none", resp.StatusCode, len(st.calls))
	}
}
