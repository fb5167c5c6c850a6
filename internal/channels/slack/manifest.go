package slack

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"
)

// BotScopes are the bot token scopes the Slack channel needs: mentions and
// messages in DMs, channels and groups, posting and editing replies, files
// in and out, assistant thread status, user names, the channels' names
// delivery looks up (slack:#name targets), and the reactions marking a
// message taken and answered.
func BotScopes() []string {
	return []string{
		"app_mentions:read", "chat:write", "reactions:write",
		"im:history", "im:read", "im:write",
		"channels:history", "groups:history", "mpim:history",
		"channels:read", "groups:read",
		"files:read", "files:write",
		"assistant:write", "users:read",
	}
}

// BotEvents are the bot events the Slack channel subscribes to
// (assistant_thread_started: an assistant thread opened, to suggest its
// prompts).
func BotEvents() []string {
	return []string{"app_mention", "message.im", "message.channels", "message.groups", "message.mpim", "assistant_thread_started"}
}

// ManifestOptions say which Slack app manifest to write.
type ManifestOptions struct {
	// Name is the app's and the bot user's name (default "fastagent").
	Name string
	// Socket selects Socket Mode (no Request URL).
	Socket bool
	// URL is the public base URL of the ingress (https://host); the
	// Request URL is URL + "/slack". Empty: a placeholder to edit.
	URL string
}

// URLPlaceholder is the Request URL base written when no URL is given.
const URLPlaceholder = "https://YOUR-PUBLIC-HOST"

// RequestURL returns the Events API Request URL for base: https only,
// with Path appended unless base already ends with it.
func RequestURL(base string) (string, error) {
	if base == "" {
		return URLPlaceholder + Path, nil
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("slack: url %q: %w", base, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("slack: url %q: Slack only calls https://host URLs", base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("slack: url %q: want https://host[/prefix] without query or fragment", base)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(u.Path, Path) {
		u.Path += Path
	}
	return u.String(), nil
}

// manifest is the part of Slack's app manifest (YAML) the channel sets.
type manifest struct {
	DisplayInformation struct {
		Name        string `yaml:"name"`
		Description string `yaml:"description"`
	} `yaml:"display_information"`
	Features struct {
		AppHome struct {
			HomeTabEnabled             bool `yaml:"home_tab_enabled"`
			MessagesTabEnabled         bool `yaml:"messages_tab_enabled"`
			MessagesTabReadOnlyEnabled bool `yaml:"messages_tab_read_only_enabled"`
		} `yaml:"app_home"`
		BotUser struct {
			DisplayName  string `yaml:"display_name"`
			AlwaysOnline bool   `yaml:"always_online"`
		} `yaml:"bot_user"`
		// AssistantView is required by the assistant:write scope.
		AssistantView struct {
			AssistantDescription string `yaml:"assistant_description"`
		} `yaml:"assistant_view"`
	} `yaml:"features"`
	OAuthConfig struct {
		Scopes struct {
			Bot []string `yaml:"bot"`
		} `yaml:"scopes"`
	} `yaml:"oauth_config"`
	Settings struct {
		EventSubscriptions struct {
			RequestURL string   `yaml:"request_url,omitempty"`
			BotEvents  []string `yaml:"bot_events"`
		} `yaml:"event_subscriptions"`
		// Interactivity carries approval button clicks, on the events'
		// Request URL (or Socket Mode).
		Interactivity struct {
			IsEnabled  bool   `yaml:"is_enabled"`
			RequestURL string `yaml:"request_url,omitempty"`
		} `yaml:"interactivity"`
		OrgDeployEnabled     bool `yaml:"org_deploy_enabled"`
		SocketModeEnabled    bool `yaml:"socket_mode_enabled"`
		TokenRotationEnabled bool `yaml:"token_rotation_enabled"`
	} `yaml:"settings"`
}

// Manifest returns the Slack app manifest (YAML) of the channel: the bot
// scopes and events it needs, and either the Request URL or Socket Mode.
func Manifest(o ManifestOptions) ([]byte, error) {
	name := o.Name
	if name == "" {
		name = "fastagent"
	}
	if len(name) > 35 {
		return nil, errors.New("slack: app name: at most 35 characters")
	}
	var m manifest
	m.DisplayInformation.Name = name
	m.DisplayInformation.Description = "A durable agent served by fastagent"
	m.Features.AppHome.MessagesTabEnabled = true
	m.Features.BotUser.DisplayName = name
	m.Features.BotUser.AlwaysOnline = true
	m.Features.AssistantView.AssistantDescription = "Ask " + name + " in a DM, or mention it in a channel."
	m.OAuthConfig.Scopes.Bot = BotScopes()
	m.Settings.EventSubscriptions.BotEvents = BotEvents()
	m.Settings.Interactivity.IsEnabled = true
	if o.Socket {
		if o.URL != "" {
			return nil, errors.New("slack: a Socket Mode app has no Request URL: drop the URL or Socket Mode")
		}
		m.Settings.SocketModeEnabled = true
	} else {
		u, err := RequestURL(o.URL)
		if err != nil {
			return nil, err
		}
		m.Settings.EventSubscriptions.RequestURL = u
		m.Settings.Interactivity.RequestURL = u
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&m); err != nil {
		return nil, fmt.Errorf("slack: manifest: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("slack: manifest: %w", err)
	}
	return out.Bytes(), nil
}

// ChannelFile returns a channels/slack.yaml for the transport, every
// optional key shown commented out with its default.
func ChannelFile(socket bool) []byte {
	var b strings.Builder
	b.WriteString("# The Slack channel. Secrets never go in this file: it names the\n# environment variables that hold them.\n")
	if socket {
		b.WriteString("transport: socket              # Socket Mode: no public URL\n")
		b.WriteString("# botTokenEnv: " + DefaultBotTokenEnv + "     # xoxb-…\n")
		b.WriteString("# appTokenEnv: " + DefaultAppTokenEnv + "     # xapp-… (app-level token, connections:write)\n")
	} else {
		b.WriteString("# transport: http               # Events API on POST " + Path + "\n")
		b.WriteString("# signingSecretEnv: " + DefaultSigningSecretEnv + "\n")
		b.WriteString("# botTokenEnv: " + DefaultBotTokenEnv + "     # xoxb-…\n")
	}
	b.WriteString(`# Sessions: thread (each top-level DM or summon starts a thread session)
# or continuous (one session per conversation).
# directMessageSession: thread
# groupSession: thread
# In channels: mentions (only @bot summons) or context (also bare replies in
# the bot's threads; other discussion is folded into the next answer).
# groupMode: mentions
`)
	return []byte(b.String())
}

// InstallSteps returns what to do with the manifest, for the transport.
func InstallSteps(o ManifestOptions, manifestFile string) string {
	where := "the manifest above"
	if manifestFile != "" {
		where = manifestFile
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Install the Slack app:\n")
	fmt.Fprintf(&b, "  1. https://api.slack.com/apps → Create New App → From a manifest → pick the workspace → paste %s.\n", where)
	fmt.Fprintf(&b, "  2. Install to Workspace; copy the Bot User OAuth Token (xoxb-…) from OAuth & Permissions.\n")
	if o.Socket {
		fmt.Fprintf(&b, "  3. Basic Information → App-Level Tokens → Generate, scope connections:write; copy it (xapp-…).\n")
		fmt.Fprintf(&b, "  4. Set in the environment of fastagent (worker and ingress):\n")
		fmt.Fprintf(&b, "       export %s=xoxb-…\n       export %s=xapp-…\n", DefaultBotTokenEnv, DefaultAppTokenEnv)
		fmt.Fprintf(&b, "  5. fastagent dev — /health answers 200 once the socket is connected.\n")
	} else {
		fmt.Fprintf(&b, "  3. Basic Information → App Credentials → copy the Signing Secret.\n")
		fmt.Fprintf(&b, "  4. Set in the environment of fastagent (worker and ingress):\n")
		fmt.Fprintf(&b, "       export %s=…\n       export %s=xoxb-…\n", DefaultSigningSecretEnv, DefaultBotTokenEnv)
		fmt.Fprintf(&b, "  5. fastagent dev, reachable from Slack at the Request URL (e.g. cloudflared tunnel --url http://127.0.0.1:8787);\n")
		fmt.Fprintf(&b, "     then Event Subscriptions → Retry to verify the URL.\n")
		if o.URL == "" {
			fmt.Fprintf(&b, "     The manifest's Request URL is a placeholder: edit it, or run again with --url https://your-host.\n")
		}
	}
	fmt.Fprintf(&b, "  6. Test it: send the bot a DM, or invite it to a channel (/invite @bot) and mention it.\n")
	return b.String()
}
