package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/channels/webhook"
	"github.com/fastagent/fastagent/internal/workspace"
)

// addWebhookOptions are the flags of `add webhook`.
type addWebhookOptions struct {
	scheme, url string
	force       bool
}

func newAddWebhook(g *globals) *cobra.Command {
	o := &addWebhookOptions{}
	cmd := &cobra.Command{
		Use:   "webhook <name>",
		Short: "Write channels/webhooks/<name>.yaml (POST /hooks/<name>), make its secret and print how to send a test event",
		Long: "Writes channels/webhooks/<name>.yaml in the agent dir (never over an existing one without --force):\n" +
			"every event verified with --scheme (standard: Standard Webhooks; hmac: an HMAC header; token: a shared\n" +
			"secret header) is a turn in the session hook:<name>. Generates a secret and prints the variable to set,\n" +
			"then a test event to send with `fastagent hook send <name>`.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAddWebhook(g, o, args[0], cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.scheme, "scheme", webhook.SchemeStandard, "how requests are verified: standard, hmac or token")
	f.StringVar(&o.url, "url", "", "public base URL of the ingress; the endpoint is <url>/hooks/<name>")
	f.BoolVar(&o.force, "force", false, "overwrite an existing file")
	return cmd
}

func runAddWebhook(g *globals, o *addWebhookOptions, name string, out io.Writer) error {
	file, err := webhook.File(name, o.scheme)
	if err != nil {
		return usageError("%w", err)
	}
	agentDir, err := agentDirOf(g)
	if err != nil {
		return failure("%w", err)
	}
	path := filepath.Join(agentDir, workspace.ChannelsDir, webhook.Dir, name+".yaml")
	if err := refuseExisting(path, o.force); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return failure("%w", err)
	}
	if err := os.WriteFile(path, file, 0o644); err != nil { //nolint:gosec // G306: holds no secret, only a variable name
		return failure("write %s: %w", path, err)
	}
	base := "http://127.0.0.1:8787"
	if o.url != "" {
		base = strings.TrimRight(o.url, "/")
	}
	env := webhook.SecretEnvName(name)
	fmt.Fprintf(out, "Wrote %s (POST %s%s).\n\n", path, webhook.PathPrefix, name)
	fmt.Fprintf(out, "1. Set the secret where the ingress runs (keep it out of the repository):\n\n   export %s='%s'\n\n", env, webhook.NewSecret(o.scheme))
	fmt.Fprintf(out, "2. Give the sender the URL %s%s%s and the same secret.\n\n", base, webhook.PathPrefix, name)
	fmt.Fprintf(out, "3. Start (fastagent dev) and send a signed test event:\n\n"+
		"   echo '{\"type\":\"test\",\"text\":\"hello\"}' > event.json\n"+
		"   fastagent hook send %s --data @event.json --url %s\n\n"+
		"   It answers 202 with the turn's key; follow it with GET /sessions/hook:%s/turns/<key>/events.\n", name, base, name)
	return nil
}

// hookSendOptions are the flags of `hook send`.
type hookSendOptions struct {
	data, url string
}

func newHook(g *globals) *cobra.Command {
	hook := &cobra.Command{Use: "hook", Short: "Work with webhook endpoints (channels/webhooks/)"}
	o := &hookSendOptions{}
	send := &cobra.Command{
		Use:   "send <name>",
		Short: "Sign an event as endpoint <name> verifies it (its secret from the environment) and POST it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runHookSend(g, o, args[0], cmd.OutOrStdout())
		},
	}
	f := send.Flags()
	f.StringVar(&o.data, "data", `{"type":"test","text":"hello"}`, "the event's JSON body, or @file to read it from a file")
	f.StringVar(&o.url, "url", "http://127.0.0.1:8787", "base URL of the ingress")
	hook.AddCommand(send)
	return hook
}

func runHookSend(g *globals, o *hookSendOptions, name string, out io.Writer) error {
	agentDir, err := agentDirOf(g)
	if err != nil {
		return failure("%w", err)
	}
	path := filepath.Join(agentDir, workspace.ChannelsDir, webhook.Dir, name+".yaml")
	ch, err := webhook.LoadFile(path, os.Getenv)
	if err != nil {
		return failure("%w", err)
	}
	body := []byte(o.data)
	if f, ok := strings.CutPrefix(o.data, "@"); ok {
		if body, err = os.ReadFile(f); err != nil { //nolint:gosec // G304: the user names the file
			return usageError("--data: %w", err)
		}
	}
	d := ch.Door.(*webhook.Door)
	h, err := d.SignRequest(body, time.Now())
	if err != nil {
		return failure("%w", err)
	}
	url := strings.TrimRight(o.url, "/") + d.Path()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return usageError("--url: %w", err)
	}
	req.Header = h
	resp, err := (&http.Client{Timeout: 70 * time.Second}).Do(req)
	if err != nil {
		return failure("POST %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Fprintf(out, "POST %s: %s\n%s", url, resp.Status, b)
	if resp.StatusCode/100 != 2 {
		return failure("the endpoint answered %s", resp.Status)
	}
	return nil
}
