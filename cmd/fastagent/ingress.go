package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/ingress"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tracing"
)

// ingressCommand is `fastagent ingress`: the public ingress.Handler
// (ingress.New) served on a listener of its own, as a program embedding
// it would serve it.
func ingressCommand(g *globals) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "ingress",
		Short: "Run only the HTTP ingress (needs a shared feed: --feed nats://…)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.argvSecrets(cmd); err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			if f.port < 0 || f.port > 65535 {
				return usageError("--port %d is not a TCP port", f.port)
			}
			if f.feed == "" || f.feed == "inprocess" {
				log.Warn("the live feed is in-process, so no other process sees this one's deltas; use --feed nats://… (FASTAGENT_FEED) when worker and ingress run apart")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg := f.config(g, log)
			// One role in this process: its registry holds the client's
			// SDK metrics and the handler's.
			cfg.Metrics = metrics.Default()
			if cfg.Agents, err = serve.ParseAgents(f.agents, g.dir); err != nil {
				return usageError("%v", err)
			}
			return runIngress(ctx, cmd.OutOrStdout(), cfg, f)
		},
	}
	f.bind(cmd, true)
	return cmd
}

// runIngress listens where cfg says, dials Temporal and serves the
// ingress.Handler until ctx ends, then drains it.
func runIngress(ctx context.Context, out io.Writer, cfg serve.Config, f *serveFlags) error {
	if err := cfg.ResolveHTTP(ctx); err != nil {
		return failure("%w", err)
	}
	tr, err := tracing.FromEnv(ctx, os.Getenv)
	if err != nil {
		return failure("%w", err)
	}
	if tr != nil {
		cfg.Tracing = tr
		cfg.Logger.Info("tracing: spans exported by OTLP")
		defer func() { //nolint:contextcheck // flushing spans at shutdown runs after ctx ended, on its own deadline
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tr.Shutdown(sctx)
		}()
	}
	host := cfg.HTTPHost
	generated, err := cfg.GenerateToken(host)
	if err != nil {
		return failure("%w", err)
	}
	ln, err := serve.Listen(host, cfg.HTTPPort)
	if err != nil {
		return failure("%w", err)
	}
	defer ln.Close()
	c, err := cfg.Dial(ctx, f.temporal.FromEnv())
	if err != nil {
		return failure("%w", err)
	}
	defer c.Close()
	opts := ingress.Options{
		Dir: cfg.Dir, AgentDir: cfg.AgentDir, StateDir: cfg.StateDir, Store: cfg.Store, Feed: cfg.Feed,
		TaskQueue: cfg.TaskQueue, Namespace: cfg.Namespace, Agents: cfg.Agents,
		APIToken: cfg.APIToken, APITokens: cfg.APITokens, TokensFile: cfg.TokensFile,
		AllowedOrigins: cfg.AllowedOrigins, AllowedHosts: cfg.AnsweredHosts(host), Logger: cfg.Logger,
	}
	if generated != "" {
		opts.APIToken = generated
	}
	if tr != nil {
		opts.TracerProvider = tr.Provider()
	}
	h, err := ingress.New(c, opts) //nolint:contextcheck // the handler and its channel connections live until Close, not until ctx
	if err != nil {
		return failure("%w", err)
	}
	defer func() { _ = h.Close() }()
	cfg.Metrics.WatchSessions(c, 0)
	stopMetrics, err := cfg.StartMetrics() //nolint:contextcheck // the metrics listener lives until stopMetrics, not until ctx
	if err != nil {
		return failure("%w", err)
	}
	defer stopMetrics()
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "fastagent API  %s  (POST /invoke, GET /health)\n", url)
	for _, name := range slices.Sorted(maps.Keys(cfg.Agents)) {
		fmt.Fprintf(out, "  agent %-9s %s/agents/%s   (fastagent invoke --agent %s …)\n", name, url, name, name)
	}
	if generated != "" {
		printGeneratedToken(out, generated, filepath.Join(cfg.StateDir, serve.TokenFileName))
	}
	if err := serve.ServeHTTP(ctx, ln, h, h.Drain); err != nil {
		return failure("http: %w", err)
	}
	return nil
}
