package slack_test

import (
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fastagent/fastagent/internal/channels/slack"
)

func TestManifest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		opts       slack.ManifestOptions
		wantURL    string
		wantSocket bool
		wantErr    string
	}{
		{name: "http with url", opts: slack.ManifestOptions{URL: "https://bot.example.com"}, wantURL: "https://bot.example.com/slack"},
		{name: "http with prefix and slash", opts: slack.ManifestOptions{URL: "https://example.com/agent/"}, wantURL: "https://example.com/agent/slack"},
		{name: "http url already on /slack", opts: slack.ManifestOptions{URL: "https://example.com/slack"}, wantURL: "https://example.com/slack"},
		{name: "http placeholder", opts: slack.ManifestOptions{}, wantURL: slack.URLPlaceholder + "/slack"},
		{name: "socket", opts: slack.ManifestOptions{Socket: true, Name: "helper"}, wantSocket: true},
		{name: "plain http refused", opts: slack.ManifestOptions{URL: "http://example.com"}, wantErr: "https"},
		{name: "query refused", opts: slack.ManifestOptions{URL: "https://example.com/?a=1"}, wantErr: "without query"},
		{name: "socket with url refused", opts: slack.ManifestOptions{Socket: true, URL: "https://example.com"}, wantErr: "no Request URL"},
		{name: "long name refused", opts: slack.ManifestOptions{Name: strings.Repeat("x", 36)}, wantErr: "35"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := slack.Manifest(c.opts)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Manifest error = %v, want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var m struct {
				Display struct {
					Name string `yaml:"name"`
				} `yaml:"display_information"`
				Features struct {
					AssistantView map[string]any `yaml:"assistant_view"`
					AppHome       struct {
						Messages bool `yaml:"messages_tab_enabled"`
					} `yaml:"app_home"`
				} `yaml:"features"`
				OAuth struct {
					Scopes struct {
						Bot []string `yaml:"bot"`
					} `yaml:"scopes"`
				} `yaml:"oauth_config"`
				Settings struct {
					Events struct {
						RequestURL string   `yaml:"request_url"`
						BotEvents  []string `yaml:"bot_events"`
					} `yaml:"event_subscriptions"`
					Socket bool `yaml:"socket_mode_enabled"`
				} `yaml:"settings"`
			}
			if err := yaml.Unmarshal(out, &m); err != nil {
				t.Fatalf("manifest is not YAML: %v\n%s", err, out)
			}
			for _, s := range []string{"app_mentions:read", "chat:write", "im:history", "im:read", "im:write", "channels:history",
				"groups:history", "mpim:history", "channels:read", "groups:read", "files:read", "files:write", "assistant:write", "users:read"} {
				if !slices.Contains(m.OAuth.Scopes.Bot, s) {
					t.Errorf("scope %s missing: %v", s, m.OAuth.Scopes.Bot)
				}
			}
			for _, e := range []string{"app_mention", "message.im", "message.channels", "message.groups", "message.mpim", "assistant_thread_started"} {
				if !slices.Contains(m.Settings.Events.BotEvents, e) {
					t.Errorf("bot event %s missing: %v", e, m.Settings.Events.BotEvents)
				}
			}
			if m.Settings.Events.RequestURL != c.wantURL || m.Settings.Socket != c.wantSocket {
				t.Errorf("request_url %q socket_mode_enabled %v, want %q %v", m.Settings.Events.RequestURL, m.Settings.Socket, c.wantURL, c.wantSocket)
			}
			if m.Features.AssistantView == nil || !m.Features.AppHome.Messages {
				t.Errorf("assistant_view (needed by assistant:write) %v, messages tab %v", m.Features.AssistantView, m.Features.AppHome.Messages)
			}
			if want := c.opts.Name; want != "" && m.Display.Name != want {
				t.Errorf("name %q, want %q", m.Display.Name, want)
			}
		})
	}
}

// The channel file fastagent add slack writes loads as it says.
func TestChannelFile(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SLACK_SIGNING_SECRET": "s", "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}
	for _, socket := range []bool{false, true} {
		ch, err := slack.New(slack.ChannelFile(socket), func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("socket=%v: %v\n%s", socket, err, slack.ChannelFile(socket))
		}
		if (ch.Conn != nil) != socket || (ch.Door.Path() == "") != socket {
			t.Errorf("socket=%v: conn %v path %q", socket, ch.Conn != nil, ch.Door.Path())
		}
	}
}
