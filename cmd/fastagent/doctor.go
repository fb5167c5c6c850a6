package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/doctor"
	"github.com/fastagent/fastagent/internal/plugin"
	"github.com/fastagent/fastagent/internal/workspace"
)

// newDoctor is `fastagent doctor [--fix]`, the preflight.
func newDoctor(g *globals) *cobra.Command {
	f := &temporalFlags{}
	var fix bool
	var storeDSN, feedURL string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what a worker and an ingress need, one pass/fail line each (exit status 1 when any fails)",
		Long: "Preflight of a deployment, run with the worker's own settings (flags and environment):\n" +
			"  agent definition   the workspace loads\n" +
			"  temporal           the frontend answers with the configured TLS / API key (TEMPORAL_*)\n" +
			"  namespace          the namespace exists\n" +
			"  search attributes  FastAgentAgent, FastAgentPrincipal, FastAgentChannel, FastAgentParent, FastAgentStatus are registered\n" +
			"  worker deployment  with FASTAGENT_DEPLOYMENT, the deployment has a current version\n" +
			"  store              the session store (FASTAGENT_STORE) is reachable and its tables readable\n" +
			"  feed               with a NATS feed (FASTAGENT_FEED), JetStream is on and the feed's stream exists\n" +
			"  model keys         every model the agent uses has its key\n" +
			"--fix registers missing search attributes through the operator API (self-hosted Temporal; on Temporal\n" +
			"Cloud it prints the exact tcld command or UI step) and creates the feed's stream.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := argvSecretsOf(cmd, storeDSN, feedURL); err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			var report doctor.Report
			o := doctor.Options{
				Store: storeDSN, Feed: feedURL, Getenv: os.Getenv, Fix: fix,
				Deployment: plugin.VersioningFromEnv(os.Getenv).Deployment,
			}
			l, err := workspace.NewLoader(g.dir, g.agentDir)
			if err == nil {
				l.MCP = nil // the models are what this needs, not the MCP servers
				def, lerr := l.Load(ctx)
				l.Close()
				if err = lerr; err == nil {
					o.Models = def.Config.ModelSpecs()
					report = append(report, doctor.Result{Name: "agent definition", Status: doctor.Pass, Detail: def.Workspace.Dir})
					if o.Store == "" {
						stateDir := g.stateDir
						if stateDir == "" {
							stateDir = filepath.Join(def.Workspace.Dir, ".fastagent")
						}
						o.Store = filepath.Join(stateDir, "sessions.db")
					}
				}
			}
			if err != nil {
				report = append(report, doctor.Result{Name: "agent definition", Status: doctor.Fail, Detail: err.Error()})
			}
			o.Temporal = f.temporal.FromEnv().WithDevToken(g.stateDirOrDefault())
			o.Temporal.Logger = log
			report = append(report, doctor.Run(ctx, o)...)
			report.Print(cmd.OutOrStdout())
			if !report.OK() {
				return &exitError{code: exitFailure}
			}
			return nil
		},
	}
	f.bind(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&fix, "fix", false, "register missing search attributes (self-hosted Temporal) and create the feed's stream")
	fl.StringVar(&storeDSN, "store", os.Getenv("FASTAGENT_STORE"), "session store: a SQLite file or postgres://… DSN (default <state-dir>/sessions.db) [FASTAGENT_STORE]")
	fl.Lookup("store").DefValue = redactedDefault(storeDSN)
	fl.StringVar(&feedURL, "feed", envOr("FASTAGENT_FEED", "inprocess"), "live feed: inprocess, or nats://host:4222 [FASTAGENT_FEED]")
	fl.Lookup("feed").DefValue = redactedDefault(feedURL)
	return cmd
}

// argvSecretsOf refuses a store DSN or feed URL with a secret given on the
// command line, as the serving commands do.
func argvSecretsOf(cmd *cobra.Command, storeDSN, feedURL string) error {
	f := &serveFlags{store: storeDSN, feed: feedURL}
	return f.argvSecrets(cmd)
}

// redactedDefault is a flag default as --help shows it: without secrets.
func redactedDefault(s string) string {
	if secretInURL(s) {
		return fmt.Sprintf("(set, %d characters)", len(s))
	}
	return s
}
