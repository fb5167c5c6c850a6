package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tclient"
)

func devCommand(g *globals) *cobra.Command {
	f := &serveFlags{}
	var (
		temporalPort int
		uiPort       int
		noUI         bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything at once: a Temporal dev server + Web UI, worker, HTTP ingress",
		Long: "Starts a Temporal development server (SQLite file under the state dir) with the Temporal Web UI —\n" +
			"the fastagent-devserver program, as a child process — and a worker and the HTTP ingress in this\n" +
			"process. State survives restarts. Ctrl-C stops it cleanly.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.argvSecrets(cmd); err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			for name, p := range map[string]int{"--port": f.port, "--temporal-port": temporalPort, "--ui-port": uiPort} {
				if p < 0 || p > 65535 || (p == 0 && name != "--port") {
					return usageError("%s %d is not a TCP port", name, p)
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			started := time.Now()
			cfg := f.config(g, log, serve.Roles{Worker: true, Ingress: true}, cmd.ErrOrStderr())
			cfg.Temporal = serve.Temporal{Embedded: &serve.Embedded{FrontendPort: temporalPort, UIPort: uiPort}}
			if noUI {
				cfg.Temporal.Embedded.UIPort = -1
			}
			if cfg.Agents, err = serve.ParseAgents(f.agents, g.dir); err != nil {
				return usageError("%v", err)
			}
			run, err := serve.Start(ctx, cfg, serve.Components{})
			if err != nil {
				return failure("%w", err)
			}
			defer run.Close()
			if err := printDevReady(cmd.OutOrStdout(), run, started); err != nil {
				return err
			}
			if err := run.Wait(ctx); err != nil {
				return failure("%w", err)
			}
			return nil
		},
	}
	f.bind(cmd, false)
	cmd.Flags().IntVar(&temporalPort, "temporal-port", envInt("FASTAGENT_TEMPORAL_PORT", 7233), "embedded Temporal frontend port [FASTAGENT_TEMPORAL_PORT]")
	cmd.Flags().IntVar(&uiPort, "ui-port", envInt("FASTAGENT_UI_PORT", 8233), "embedded Temporal Web UI port [FASTAGENT_UI_PORT]")
	cmd.Flags().BoolVar(&noUI, "no-ui", false, "do not start the Web UI")
	return cmd
}

// printDevReady prints where everything `fastagent dev` started listens.
func printDevReady(out io.Writer, run *serve.Running, started time.Time) error {
	srv, api := run.Embedded, run.URL
	fmt.Fprintf(out, "fastagent dev ready in %s\n", time.Since(started).Round(time.Millisecond))
	fmt.Fprintf(out, "  API       %s   (POST /invoke, GET /health)\n", api)
	printAgentRoutes(out, run)
	if srv.UI != "" {
		link, err := srv.Login()
		if err != nil {
			return failure("%w", err)
		}
		fmt.Fprintf(out, "  Web UI    %s\n            (opens once; `fastagent ui-link` makes another)\n", link)
	}
	if link := devChatLink(run); link != "" {
		fmt.Fprintf(out, "  Chat      %s\n            (web chat; opens once, within %s; `fastagent chat-link` makes another)\n",
			link, ingress.DefaultChatLinkTTL)
	}
	stateDir := run.StateDir()
	fmt.Fprintf(out, "  Temporal  %s   (namespace %s; every call needs the key in %s)\n",
		srv.Frontend, srv.Namespace, filepath.Join(stateDir, tclient.DevTokenFile))
	fmt.Fprintf(out, "  State     %s\n", stateDir)
	printToken(out, run)
	fmt.Fprintf(out, "Try: fastagent invoke \"hello\" --session s1 --url %s\n", api)
	return nil
}

// devChatLink is a one-time web chat link for the principal of the run's
// token (the generated one, or FASTAGENT_API_TOKEN); "" when there is none.
func devChatLink(run *serve.Running) string {
	if run.Ingress == nil || run.Ingress.Chat == nil || run.URL == "" {
		return ""
	}
	tok := run.Token
	if tok == "" {
		tok = os.Getenv("FASTAGENT_API_TOKEN")
	}
	p, ok := run.Ingress.Tokens.Lookup(tok)
	if !ok {
		return ""
	}
	link, _ := run.Ingress.Chat.Link(p, "", ingress.DefaultChatLinkTTL)
	return run.URL + "/chat/login?t=" + link
}
