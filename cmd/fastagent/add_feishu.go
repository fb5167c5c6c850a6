package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/channels/feishu"
)

// feishuScope is one permission the app needs.
type feishuScope struct {
	name, why string
	// context: needed only with groupMode: context.
	context bool
}

// feishuScopes are the permissions of a Feishu/Lark bot app.
var feishuScopes = []feishuScope{
	{name: "im:message", why: "send and reply to messages, update them"},
	{name: "im:message.p2p_msg:readonly", why: "receive one-to-one messages sent to the bot"},
	{name: "im:message.group_at_msg:readonly", why: "receive group messages that @mention the bot"},
	{name: "im:message.group_msg", why: "receive every group message (groupMode: context only; sensitive, needs admin approval)", context: true},
	{name: "im:resource", why: "download images and files of messages"},
	{name: "cardkit:card:write", why: "create and stream the answer card (CardKit)"},
}

// addFeishuOptions are the flags of `fastagent add feishu|lark`.
type addFeishuOptions struct {
	websocket bool
	webhook   bool
	context   bool
	force     bool
}

func newAddFeishu(g *globals) []*cobra.Command {
	var out []*cobra.Command
	for _, p := range []feishu.Profile{feishu.Feishu(), feishu.Lark()} {
		o := &addFeishuOptions{}
		name := "Feishu"
		if p.Kind == feishu.KindLark {
			name = "Lark"
		}
		cmd := &cobra.Command{
			Use:   p.Kind,
			Short: fmt.Sprintf("Add the %s channel: write channels/%s.yaml and print the app's setup steps", name, p.Kind),
			Long: fmt.Sprintf("Writes channels/%s.yaml into the agent dir and prints the scopes, the event subscription,\n"+
				"the console steps and the environment variables of a %s bot app.\n\n"+
				"Transport: --webhook (the platform POSTs events to %s on the ingress: needs a public HTTPS URL)\n"+
				"or --websocket (a long connection from the worker: no public URL, only App ID and Secret).\n"+
				"Without either, it asks (and takes the webhook when nothing is typed).", p.Kind, name, p.Path),
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				dir, err := agentDirOf(g)
				if err != nil {
					return failure("%w", err)
				}
				return runAddFeishu(p, name, dir, *o, cmd.InOrStdin(), cmd.OutOrStdout())
			},
		}
		f := cmd.Flags()
		f.BoolVar(&o.websocket, "websocket", false, "receive events over the long connection (no public URL)")
		f.BoolVar(&o.webhook, "webhook", false, "receive events on POST "+p.Path+" (needs a public HTTPS URL)")
		f.BoolVar(&o.context, "context", false, "groupMode: context — bare replies in the bot's threads are turns, other group chatter is context (scope im:message.group_msg)")
		f.BoolVar(&o.force, "force", false, "overwrite an existing channels/"+p.Kind+".yaml")
		out = append(out, cmd)
	}
	return out
}

// runAddFeishu writes the channel file of profile p into the agent dir and
// prints the setup steps.
func runAddFeishu(p feishu.Profile, name, agentDir string, o addFeishuOptions, in io.Reader, out io.Writer) error {
	if o.websocket && o.webhook {
		return usageError("--websocket and --webhook exclude each other: pick one transport")
	}
	path := filepath.Join(agentDir, "channels", p.Kind+".yaml")
	if err := refuseExisting(path, o.force); err != nil {
		return err
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return failure("%w", err)
	}
	transport := feishu.TransportWebhook
	switch {
	case o.websocket:
		transport = feishu.TransportWebsocket
	case !o.webhook:
		fmt.Fprintf(out, "How should %s deliver events?\n  1) webhook   — POST %s on the ingress (needs a public HTTPS URL)\n  2) websocket — a long connection (no public URL, only App ID and Secret)\nChoice [1]: ", name, p.Path)
		line, _ := bufio.NewReader(in).ReadString('\n')
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "", "1", "webhook":
		case "2", "websocket", "ws":
			transport = feishu.TransportWebsocket
		default:
			return usageError("%q is not a transport: answer 1 (webhook) or 2 (websocket), or pass --webhook / --websocket", strings.TrimSpace(line))
		}
		fmt.Fprintln(out)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return failure("%w", err)
	}
	//nolint:gosec // G306: the channel file holds no secret (only the names of environment variables)
	if err := os.WriteFile(path, []byte(feishuChannelFile(p, name, transport, o.context)), 0o644); err != nil {
		return failure("write %s: %w", path, err)
	}
	fmt.Fprintf(out, "Wrote %s (transport: %s).\n\n", path, transport)
	printFeishuSteps(out, p, name, transport, o.context)
	return nil
}

// feishuChannelFile is the channel file: the transport and the options,
// with the secrets' environment variable names as comments (defaults).
func feishuChannelFile(p feishu.Profile, name, transport string, context bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s channel (written by fastagent add %s). Secrets never go in this file:\n", name, p.Kind)
	fmt.Fprintf(&b, "# they are read from the environment variables named below (the defaults).\n")
	fmt.Fprintf(&b, "transport: %s\n", transport)
	fmt.Fprintf(&b, "# appIdEnv: %s\n# appSecretEnv: %s\n", p.Env("APP_ID"), p.Env("APP_SECRET"))
	if transport == feishu.TransportWebhook {
		fmt.Fprintf(&b, "# verificationTokenEnv: %s\n# encryptKeyEnv: %s\n", p.Env("VERIFICATION_TOKEN"), p.Env("ENCRYPT_KEY"))
	}
	if context {
		b.WriteString("groupMode: context        # bare replies in the bot's threads are turns; other chatter is context\n")
	} else {
		b.WriteString("# groupMode: mentions      # or context (scope im:message.group_msg)\n")
	}
	b.WriteString("# directMessageSession: thread   # or continuous: one session per DM\n")
	b.WriteString("# groupMessageSession: thread    # or continuous: one session per group\n")
	b.WriteString("# maxFileBytes: 20971520         # cap of one file a message brings in\n")
	return b.String()
}

func printFeishuSteps(out io.Writer, p feishu.Profile, name, transport string, context bool) {
	console := p.BaseURL + "/app"
	fmt.Fprintf(out, "Set up the %s app (%s):\n", name, console)
	steps := []string{
		"Create a custom app (Create Custom App), then under Features add the Bot capability.",
		fmt.Sprintf("Credentials & Basic Info: copy the App ID and App Secret into %s and %s.", p.Env("APP_ID"), p.Env("APP_SECRET")),
		"Permissions & Scopes: add the scopes below.",
	}
	if transport == feishu.TransportWebsocket {
		steps = append(steps,
			"Start the agent first (make dev, or fastagent dev): the console checks the long connection when you save.",
			"Events & Callbacks → Event Configuration: choose \"Receive events through persistent connection\", save,\n     and add the event im.message.receive_v1 (Message received).")
	} else {
		steps = append(steps,
			fmt.Sprintf("Events & Callbacks → Encryption Strategy: copy the Verification Token into %s and set an\n     Encrypt Key (recommended: events are then signed and encrypted; approval buttons need it) into %s.", p.Env("VERIFICATION_TOKEN"), p.Env("ENCRYPT_KEY")),
			fmt.Sprintf("Start the agent where the platform can reach it over HTTPS (a deployment, or a tunnel to make dev),\n     then Event Configuration: \"Send events to developer server\", Request URL https://<your host>%s\n     (the console sends a challenge the ingress answers), and add the event im.message.receive_v1.", p.Path))
	}
	steps = append(steps,
		fmt.Sprintf("Events & Callbacks → Callback Configuration: deliver callbacks the same way (%s) and add the callback\n     %s (card action: the Approve / Deny buttons of approval cards).", callbackWay(p, transport), feishu.EventCardAction),
		"Version Management & Release: create a version and publish it (an admin approves sensitive scopes).",
		"Open a DM with the bot, or add it to a group and @mention it.")
	for i, s := range steps {
		fmt.Fprintf(out, "  %d. %s\n", i+1, s)
	}
	fmt.Fprintf(out, "\nScopes:\n")
	for _, s := range feishuScopes {
		if s.context && !context {
			fmt.Fprintf(out, "  %-34s %s — not needed in mentions mode\n", s.name, s.why)
			continue
		}
		fmt.Fprintf(out, "  %-34s %s\n", s.name, s.why)
	}
	fmt.Fprintf(out, "\nEvent subscription:\n  %s (Message received)\n", feishu.EventMessageReceive)
	fmt.Fprintf(out, "  %s (Message recalled) — optional: a recalled message's turn is dropped while it waits\n", feishu.EventMessageRecalled)
	fmt.Fprintf(out, "\nCallback subscription:\n  %s (card action) — the Approve / Deny buttons of approval cards\n", feishu.EventCardAction)
	fmt.Fprintf(out, "\nEnvironment (exported where the worker and the ingress run; never in the channel file):\n")
	fmt.Fprintf(out, "  %s=cli_…\n  %s=…\n", p.Env("APP_ID"), p.Env("APP_SECRET"))
	if transport == feishu.TransportWebhook {
		fmt.Fprintf(out, "  %s=…\n  %s=…   # optional, recommended; approval buttons need it\n", p.Env("VERIFICATION_TOKEN"), p.Env("ENCRYPT_KEY"))
	}
	fmt.Fprintf(out, "  %s=%s   # optional: a proxy or a test server\n", p.Env("BASE_URL"), p.BaseURL)
	fmt.Fprintf(out, "\nThen: make dev (or fastagent dev) and send the bot a message.\n")
}

// callbackWay says how the console delivers callbacks for transport.
func callbackWay(p feishu.Profile, transport string) string {
	if transport == feishu.TransportWebsocket {
		return "persistent connection"
	}
	return "developer server, Request URL https://<your host>" + p.Path
}
