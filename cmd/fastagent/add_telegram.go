package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/channels/telegram"
)

// addTelegramOptions are the flags of `fastagent add telegram`.
type addTelegramOptions struct {
	polling    bool
	mentions   bool
	force      bool
	setWebhook string
}

func newAddTelegram(g *globals) *cobra.Command {
	o := &addTelegramOptions{}
	cmd := &cobra.Command{
		Use:   "telegram",
		Short: "Add the Telegram channel: write channels/telegram.yaml and print the bot's setup steps",
		Long: "Writes channels/telegram.yaml into the agent dir and prints the BotFather steps and the environment\n" +
			"variables. Transport: the webhook (default; Telegram POSTs updates to /telegram on the ingress, which\n" +
			"needs a public HTTPS URL) or --polling (getUpdates from the ingress: no public URL).\n" +
			"--set-webhook <public base URL> also registers <url>/telegram with the Bot API (setWebhook, with the\n" +
			"secret token), using TELEGRAM_BOT_TOKEN and TELEGRAM_WEBHOOK_SECRET from the environment.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := agentDirOf(g)
			if err != nil {
				return failure("%w", err)
			}
			return runAddTelegram(cmd.Context(), dir, *o, os.Getenv, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.polling, "polling", false, "receive updates by long polling from the ingress (no public URL)")
	f.BoolVar(&o.mentions, "mentions", false, "groupMode: mentions — drop un-summoned group messages instead of keeping them as context")
	f.StringVar(&o.setWebhook, "set-webhook", "", "public https base URL of the ingress: register <url>/telegram with setWebhook")
	f.BoolVar(&o.force, "force", false, "overwrite an existing channels/telegram.yaml")
	return cmd
}

// runAddTelegram writes the channel file, registers the webhook when
// asked, and prints the setup steps.
func runAddTelegram(ctx context.Context, agentDir string, o addTelegramOptions, getenv func(string) string, out io.Writer) error {
	if o.polling && o.setWebhook != "" {
		return usageError("--polling and --set-webhook exclude each other: pick one transport")
	}
	if o.setWebhook != "" && !strings.HasPrefix(o.setWebhook, "https://") && !strings.HasPrefix(o.setWebhook, "http://") {
		return usageError("--set-webhook: %q is not an http(s) URL", o.setWebhook)
	}
	path := filepath.Join(agentDir, "channels", telegram.Kind+".yaml")
	if err := refuseExisting(path, o.force); err != nil {
		return err
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return failure("%w", err)
	}
	transport := telegram.TransportWebhook
	if o.polling {
		transport = telegram.TransportPolling
	}
	if o.setWebhook != "" {
		if err := setTelegramWebhook(ctx, o.setWebhook, getenv, out); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return failure("%w", err)
	}
	var b strings.Builder
	b.WriteString("# Telegram channel (written by fastagent add telegram). Secrets never go in this file:\n")
	b.WriteString("# they are read from the environment variables named below (the defaults).\n")
	fmt.Fprintf(&b, "transport: %s\n", transport)
	fmt.Fprintf(&b, "# botTokenEnv: %s\n", telegram.EnvBotToken)
	if transport == telegram.TransportWebhook {
		fmt.Fprintf(&b, "# secretTokenEnv: %s\n", telegram.EnvSecret)
	}
	if o.mentions {
		b.WriteString("groupMode: mentions        # un-summoned group messages are dropped\n")
	} else {
		b.WriteString("# groupMode: context       # or mentions: drop un-summoned group messages\n")
	}
	b.WriteString("# botUsername: my_bot      # default: asked with getMe\n")
	b.WriteString("# maxFileBytes: 20971520   # cap of one file a message brings in\n")
	//nolint:gosec // G306: the channel file holds no secret (only the names of environment variables)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return failure("write %s: %w", path, err)
	}
	fmt.Fprintf(out, "Wrote %s (transport: %s).\n\n", path, transport)
	steps := []string{
		"In Telegram, talk to @BotFather: /newbot, pick a name and a username; copy the token into " + telegram.EnvBotToken + ".",
	}
	if !o.mentions {
		steps = append(steps, "Groups: @BotFather → /setprivacy → Disable, so the bot sees group chatter it keeps as context\n     (with privacy on it only gets commands, @mentions and replies to it).")
	}
	if transport == telegram.TransportPolling {
		steps = append(steps, "Start the agent (make dev, or fastagent dev / fastagent ingress — one ingress per bot): it deletes any webhook and polls.")
	} else {
		steps = append(steps,
			"Pick a secret token (1-256 of A-Z a-z 0-9 _ -) into "+telegram.EnvSecret+": Telegram sends it with every update.",
			"Start the agent where Telegram can reach it over HTTPS, then register the webhook:\n     fastagent add telegram --force --set-webhook https://<your host>   (or call setWebhook with url=https://<your host>"+telegram.Path+"\n     and secret_token=$"+telegram.EnvSecret+").")
	}
	steps = append(steps, "Open a chat with the bot, or add it to a group and @mention it, reply to it, or send a /command. /stop stops a running answer.")
	fmt.Fprintln(out, "Set up the bot:")
	for i, s := range steps {
		fmt.Fprintf(out, "  %d. %s\n", i+1, s)
	}
	fmt.Fprintf(out, "\nEnvironment (exported where the worker and the ingress run; never in the channel file):\n")
	fmt.Fprintf(out, "  %s=123456:ABC…\n", telegram.EnvBotToken)
	if transport == telegram.TransportWebhook {
		fmt.Fprintf(out, "  %s=…\n", telegram.EnvSecret)
	}
	fmt.Fprintf(out, "  %s=%s   # optional: a local Bot API server or a test server\n", telegram.EnvAPIURL, telegram.DefaultAPIURL)
	return nil
}

// setTelegramWebhook checks the token with getMe and registers
// <base>/telegram with the secret token.
func setTelegramWebhook(ctx context.Context, base string, getenv func(string) string, out io.Writer) error { //nolint:contextcheck // the command's own requests time out on their own clock
	token, secret := getenv(telegram.EnvBotToken), getenv(telegram.EnvSecret)
	if token == "" || secret == "" {
		return usageError("--set-webhook needs %s and %s in the environment", telegram.EnvBotToken, telegram.EnvSecret)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	api := telegram.NewAPI(getenv(telegram.EnvAPIURL), token)
	var me telegram.User
	if err := api.Call(ctx, "getMe", struct{}{}, &me); err != nil {
		return failure("check the bot token: %w", err)
	}
	url := strings.TrimSuffix(base, "/") + telegram.Path
	params := map[string]any{"url": url, "secret_token": secret, "allowed_updates": telegram.AllowedUpdates}
	if err := api.Call(ctx, "setWebhook", params, nil); err != nil {
		return failure("setWebhook: %w", err)
	}
	fmt.Fprintf(out, "Registered %s as the webhook of @%s.\n", url, me.Username)
	return nil
}
