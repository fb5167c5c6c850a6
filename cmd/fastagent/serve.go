package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/doctor"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/internal/plugin"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tclient"
)

// serveFlags are shared by dev, start, worker and ingress.
type serveFlags struct {
	host      string
	port      int
	store     string
	feed      string
	temporal  tclient.Config
	taskQueue string
	// tokensFile holds tokens lines (principal:rights:sha256hex).
	tokensFile string
	// stopTimeout bounds how long a stopping worker lets running tool and
	// model calls finish.
	stopTimeout time.Duration
	// agents are --agent name=dir: other agents served beside this one.
	agents []string
}

func (f *serveFlags) bind(cmd *cobra.Command, withTemporal bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.host, "host", os.Getenv("FASTAGENT_HTTP_HOST"), "HTTP listen host (default http.host of fastagent.yaml, else 127.0.0.1; any other than loopback needs API tokens) [FASTAGENT_HTTP_HOST]")
	fl.IntVarP(&f.port, "port", "p", envInt("FASTAGENT_HTTP_PORT", 0), "HTTP listen port (default http.port of fastagent.yaml, else 8787) [FASTAGENT_HTTP_PORT]")
	fl.StringVar(&f.store, "store", os.Getenv("FASTAGENT_STORE"), "session store: a SQLite file or postgres://… DSN (default <state-dir>/sessions.db; a DSN with a password only through FASTAGENT_STORE) [FASTAGENT_STORE]")
	// --help shows the default, which may be a DSN with a password: redacted.
	fl.Lookup("store").DefValue = serve.RedactDSN(f.store)
	fl.StringVar(&f.tokensFile, "tokens-file", os.Getenv("FASTAGENT_TOKENS_FILE"), "API tokens file: lines principal:rights:sha256hex (see fastagent token) [FASTAGENT_TOKENS_FILE]")
	fl.StringVar(&f.feed, "feed", envOr("FASTAGENT_FEED", "inprocess"), "live feed: inprocess, or nats://host:4222 when worker and ingress run apart (a URL with a token only through FASTAGENT_FEED) [FASTAGENT_FEED]")
	fl.StringVar(&f.taskQueue, "task-queue", envOr("FASTAGENT_TASK_QUEUE", "fastagent"), "Temporal task queue [FASTAGENT_TASK_QUEUE]")
	fl.DurationVar(&f.stopTimeout, "stop-timeout", envDuration("FASTAGENT_WORKER_STOP_TIMEOUT", plugin.DefaultStopTimeout),
		"on SIGTERM/Ctrl-C, how long the worker lets running tool and model calls finish before it cancels them [FASTAGENT_WORKER_STOP_TIMEOUT]")
	fl.StringArrayVar(&f.agents, "agent", nil, "serve another agent's folder beside this one, as name=folder: its workers poll task queue <name>, "+
		"its own sessions are under /agents/<name>/ (invoke, sessions…), and this agent may delegate to it "+
		"(delegation.agents.<name>.taskQueue: <name>); repeatable")
	if withTemporal {
		fl.StringVar(&f.temporal.Address, "temporal-address", envOr("TEMPORAL_ADDRESS", "127.0.0.1:7233"), "Temporal frontend host:port [TEMPORAL_ADDRESS]")
		fl.StringVar(&f.temporal.Namespace, "namespace", envOr("TEMPORAL_NAMESPACE", "default"), "Temporal namespace [TEMPORAL_NAMESPACE]")
	}
}

// config is the runtime's configuration of the flags and the environment
// for roles, its warnings printed to stderr.
func (f *serveFlags) config(g *globals, log *slog.Logger, roles serve.Roles, stderr io.Writer) serve.Config {
	cfg := serve.Config{
		Roles:     roles,
		Temporal:  serve.Temporal{Dial: f.temporal.FromEnv()},
		Dir:       g.dir,
		AgentDir:  g.agentDir,
		StateDir:  g.stateDir,
		Store:     f.store,
		Feed:      f.feed,
		TaskQueue: f.taskQueue,
		Namespace: f.temporal.Namespace,
		HTTPHost:  f.host,
		HTTPPort:  f.port,
		Logger:    log,
		Warn:      func(w string) { fmt.Fprintln(stderr, "warning:", w) },
		// Secrets come from the environment only, never from a flag default.
		APIToken:   os.Getenv("FASTAGENT_API_TOKEN"),
		APITokens:  os.Getenv("FASTAGENT_API_TOKENS"),
		TokensFile: f.tokensFile,

		WorkerStopTimeout: f.stopTimeout,
		Versioning:        plugin.VersioningFromEnv(os.Getenv),
		Metrics:           metrics.New(),
		MetricsAddr:       os.Getenv(metrics.EnvAddr),
		// Spans are exported by OTLP when OTEL_EXPORTER_OTLP_* ask for it.
		TracingEnv: os.Getenv,
	}
	if roles.Ingress && !roles.Worker {
		// One role in this process: its registry holds the client's SDK
		// metrics and the handler's (ingress.New's).
		cfg.Metrics = metrics.Default()
	}
	return cfg
}

// argvSecrets refuses a store DSN or feed URL given as a flag with a
// password or token in it: the command line is /proc/<pid>/cmdline, which
// every process of the machine reads (ps, and a tool in Landlock mode),
// unlike the environment. The error names the variable to use instead.
func (f *serveFlags) argvSecrets(cmd *cobra.Command) error {
	const where = "on the command line, where every process on this machine can read it (/proc/<pid>/cmdline, ps; tools included)"
	if cmd.Flags().Changed("store") && secretInURL(f.store) {
		return usageError("--store holds a password %s: set FASTAGENT_STORE instead, or keep the password in a file (passfile=… in the DSN, or PGPASSFILE)", where)
	}
	if cmd.Flags().Changed("feed") && secretInURL(f.feed) {
		return usageError("--feed holds a token or password %s: set FASTAGENT_FEED instead", where)
	}
	return nil
}

// secretInURL reports whether a store DSN or feed URL (a comma-separated
// list of them) holds a secret: a password (user:password@, password=…)
// or, in a NATS URL, a user alone, which is its token.
func secretInURL(s string) bool {
	if serve.RedactDSN(s) != s {
		return true
	}
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); ok {
			return true
		}
		switch strings.ToLower(u.Scheme) {
		case "nats", "tls", "ws", "wss":
			if u.User.Username() != "" {
				return true
			}
		}
	}
	return false
}

// envDuration reads a duration ("30s", "2m") from the environment.
func envDuration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		fmt.Fprintf(os.Stderr, "fastagent: %s=%q is not a duration like 30s; using %s\n", name, v, def)
		return def
	}
	return d
}

func serveCommands(g *globals) []*cobra.Command {
	return []*cobra.Command{
		devCommand(g),
		processCommand(g, "start", "Run a worker and the HTTP ingress against a Temporal cluster", serve.Roles{Worker: true, Ingress: true}),
		processCommand(g, "worker", "Run only a worker (session workflows, model and tool activities)", serve.Roles{Worker: true}),
		processCommand(g, "ingress", "Run only the HTTP ingress (needs a shared feed: --feed nats://…)", serve.Roles{Ingress: true}),
		scheduleCommand(g),
		fireCommand(g),
		rolloutCommand(g),
	}
}

// processCommand builds start, worker and ingress: the one runtime
// (serve.Start) with some roles switched off, against a Temporal cluster.
func processCommand(g *globals, name, short string, roles serve.Roles) *cobra.Command {
	f := &serveFlags{}
	var groups []string
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
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
			if roles.Worker != roles.Ingress && (f.feed == "" || f.feed == "inprocess") {
				log.Warn("the live feed is in-process, so no other process sees this one's deltas; use --feed nats://… (FASTAGENT_FEED) when worker and ingress run apart")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg := f.config(g, log, roles, cmd.ErrOrStderr())
			if cfg.Agents, err = serve.ParseAgents(f.agents, g.dir); err != nil {
				return usageError("%v", err)
			}
			if err := activityGroups(cmd, groups, &cfg); err != nil {
				return err
			}
			run, err := serve.Start(ctx, cfg, serve.Components{})
			if err != nil {
				return failure("%w", err)
			}
			defer run.Close()
			if roles.Worker {
				preflight(ctx, log, run, cfg)
			}
			if run.URL != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "fastagent API  %s  (POST /invoke, GET /health)\n", run.URL)
				printAgentRoutes(cmd.OutOrStdout(), run)
				printToken(cmd.OutOrStdout(), run)
			}
			return run.Wait(ctx)
		},
	}
	f.bind(cmd, true)
	if roles.Worker && !roles.Ingress {
		cmd.Flags().StringSliceVar(&groups, "activities", envSlice("FASTAGENT_ACTIVITIES"),
			"serve only these activity groups (model, tools) and no workflows: a worker of their own, on GPU machines or in a network zone, "+
				"polling the task queue fastagent.yaml's activities: block places them on (or --task-queue) [FASTAGENT_ACTIVITIES]")
	}
	return cmd
}

// activityGroups applies --activities: the worker serves those groups
// alone, on --task-queue when given, else on the task queue
// fastagent.yaml places them on.
func activityGroups(cmd *cobra.Command, names []string, cfg *serve.Config) error {
	if len(names) == 0 {
		return nil
	}
	if len(cfg.Agents) > 0 {
		return usageError("--activities serves one agent's activities: drop --agent")
	}
	for _, n := range names {
		grp, err := activities.ParseGroup(strings.TrimSpace(n))
		if err != nil {
			return usageError("--activities: %v", err)
		}
		if !grp.Placeable() {
			return usageError("--activities %s: only the model and tools groups run on a worker of their own; the %s activities run beside the session workflows", grp, grp)
		}
		cfg.ActivityGroups = append(cfg.ActivityGroups, grp)
	}
	if cfg.Feed == "" || cfg.Feed == "inprocess" {
		return usageError("--activities %s: %s; configure the NATS feed the session workers and ingresses use (--feed nats://host:4222, FASTAGENT_FEED)",
			strings.Join(names, ","), activities.InProcessFeedApart)
	}
	if !cmd.Flags().Changed("task-queue") && os.Getenv("FASTAGENT_TASK_QUEUE") == "" {
		cfg.TaskQueue = "" // where fastagent.yaml places them
	}
	return nil
}

// envSlice reads a comma-separated list from the environment.
func envSlice(name string) []string {
	var out []string
	for _, v := range strings.Split(os.Getenv(name), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// printAgentRoutes lists the routes of the agents served beside the main
// one (--agent).
func printAgentRoutes(out io.Writer, run *serve.Running) {
	if run.Ingress == nil {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(run.Ingress.Agents)) {
		fmt.Fprintf(out, "  agent %-9s %s/agents/%s   (fastagent invoke --agent %s …)\n", name, run.URL, name, name)
	}
}

// printToken tells the user the API token generated for this run.
func printToken(out io.Writer, run *serve.Running) {
	if run.Token == "" {
		return
	}
	fmt.Fprintf(out, "  Token     %s\n            (generated for this run, in %s; fastagent invoke/session read it; set FASTAGENT_API_TOKEN to choose one)\n", run.Token, run.TokenFile)
}

// preflight runs doctor's Temporal checks on a started worker's client and
// logs each failure with what to do: a namespace without the search
// attributes, a versioned worker whose deployment has no current version
// (it gets no work until `fastagent rollout`). It never stops the worker.
func preflight(ctx context.Context, log *slog.Logger, run *serve.Running, cfg serve.Config) {
	o := doctor.Options{Temporal: tclient.Config{Address: cfg.Temporal.Dial.Address, Namespace: cfg.Namespace}, Deployment: cfg.Versioning.Deployment}
	for _, r := range o.OnClient(ctx, run.Client) {
		if r.Status == doctor.Fail {
			log.Warn("preflight: "+r.Name, "problem", r.Detail, "check", "fastagent doctor")
		}
	}
}
