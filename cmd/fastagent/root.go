package main

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tracing"
)

// globals are the flags every command shares.
type globals struct {
	dir      string
	agentDir string
	stateDir string
	logLevel string
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "fastagent",
		Short:         "Serve file-defined agents durably on Temporal",
		Long:          "Serve file-defined agents durably on Temporal.\n\n" + envHelp(),
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError("%w (see %s --help)", err, c.CommandPath())
	})
	pf := root.PersistentFlags()
	pf.StringVarP(&g.dir, "dir", "C", envOr("FASTAGENT_DIR", "."), "workspace (working directory of the agent) [FASTAGENT_DIR]")
	pf.StringVar(&g.agentDir, "agent-dir", os.Getenv("FASTAGENT_AGENT_DIR"), "folder with persona.md, skills/, tools/… inside the workspace [FASTAGENT_AGENT_DIR]")
	pf.StringVar(&g.stateDir, "state-dir", os.Getenv("FASTAGENT_STATE_DIR"), "machine state (default <dir>/.fastagent) [FASTAGENT_STATE_DIR]")
	pf.StringVar(&g.logLevel, "log-level", envOr("FASTAGENT_LOG_LEVEL", "info"), "debug, info, warn or error [FASTAGENT_LOG_LEVEL]")

	root.AddCommand(newInvoke(g), newChat(g), newInit(g), newAdd(g), newInfo(g), newTool(g), newSession(g), newMemory(g), newToken(), newVersion(), newCodecServer(g), newUILink(g), newChatLink(g), newHook(g), newSearchAttributes(g), newDeploy(g), newDoctor(g), newMCP(g))
	root.AddCommand(serveCommands(g)...)
	return root
}

func (g *globals) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usageError("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	// Records logged with a traced context carry trace_id and span_id.
	return slog.New(tracing.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))), nil
}

// bindURL binds --url (the ingress's address) and --agent (one agent of a
// deployment serving several, whose routes are under /agents/<name>/) on
// fs; agentBase joins them.
func bindURL(fs *pflag.FlagSet, base, agentName *string) {
	fs.StringVar(base, "url", envOr("FASTAGENT_URL", fmt.Sprintf("http://127.0.0.1:%d", envInt("FASTAGENT_HTTP_PORT", 8787))), "fastagent HTTP address [FASTAGENT_URL]")
	fs.StringVar(agentName, "agent", os.Getenv("FASTAGENT_AGENT"), "the agent to talk to, when the deployment serves several (--agent name=folder): "+
		"its routes are <url>/agents/<name>/ [FASTAGENT_AGENT]")
}

// agentBase is the base URL of agent name's routes on the ingress at base
// (base itself for "").
func agentBase(base, name string) string {
	base = strings.TrimRight(base, "/")
	if name == "" {
		return base
	}
	return base + "/agents/" + url.PathEscape(name)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fastagent: %s=%q is not a number; using %d\n", name, v, def)
		return def
	}
	return n
}

func isCobraUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "requires exactly", "invalid argument", "flag needs an argument"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// apiToken is the token `invoke` and `session` send: FASTAGENT_API_TOKEN,
// else the one a loopback `dev`/`start`/`ingress` generated into
// <state-dir>/api-token.
func (g *globals) apiToken() string {
	if t := os.Getenv("FASTAGENT_API_TOKEN"); t != "" {
		return t
	}
	b, err := os.ReadFile(filepath.Join(g.stateDirOrDefault(), serve.TokenFileName))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// stateDirOrDefault is --state-dir, else <dir>/.fastagent.
func (g *globals) stateDirOrDefault() string {
	if g.stateDir != "" {
		return g.stateDir
	}
	return filepath.Join(g.dir, ".fastagent")
}
