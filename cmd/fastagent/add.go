package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/workspace"
)

// manifestFile is where --write-manifest puts the Slack app manifest, in
// the workspace (not a rule file: the agent needs nothing from it).
const manifestFile = "slack-app-manifest.yaml"

// newAdd is the parent of the commands that add a channel to the agent
// (each writes channels/<kind>.yaml and prints the platform's setup steps).
func newAdd(g *globals) *cobra.Command {
	add := &cobra.Command{
		Use:   "add",
		Short: "Add a channel, a skill or an MCP server to the agent (writes the folder and prints the next steps)",
		Args:  cobra.NoArgs,
	}
	add.AddCommand(newAddSlack(g))
	add.AddCommand(newAddFeishu(g)...)
	add.AddCommand(newAddTelegram(g))
	add.AddCommand(newAddGitHub(g))
	add.AddCommand(newAddWebhook(g))
	add.AddCommand(newAddSkill(g), newAddMCP(g))
	return add
}

// addSlackOptions are the flags of `add slack`.
type addSlackOptions struct {
	socket, writeManifest, force bool
	url, name                    string
}

func newAddSlack(g *globals) *cobra.Command {
	o := &addSlackOptions{}
	cmd := &cobra.Command{
		Use:   "slack",
		Short: "Write channels/slack.yaml and print the Slack app manifest and install steps",
		Long: "Writes channels/slack.yaml in the agent dir (never over an existing one without --force), then\n" +
			"prints the Slack app manifest (scopes, events, and the Request URL <url>/slack or Socket Mode)\n" +
			"and the steps to install the app and set its secrets.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAddSlack(g, o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.socket, "socket", false, "use Socket Mode (an app-level token, no public URL) instead of the Events API over HTTP")
	f.StringVar(&o.url, "url", "", "public https base URL of the ingress; the Request URL is <url>/slack")
	f.StringVar(&o.name, "name", "", "the Slack app's and bot's name (default fastagent)")
	f.BoolVar(&o.writeManifest, "write-manifest", false, "write the manifest to "+manifestFile+" in the workspace instead of printing it")
	f.BoolVar(&o.force, "force", false, "overwrite an existing channels/slack.yaml (and manifest file)")
	return cmd
}

func runAddSlack(g *globals, o *addSlackOptions, out io.Writer) error {
	mo := slack.ManifestOptions{Name: o.name, Socket: o.socket, URL: o.url}
	if o.socket && o.url != "" {
		return usageError("--socket and --url exclude each other: a Socket Mode app has no Request URL")
	}
	// Everything is checked before anything is written.
	manifest, err := slack.Manifest(mo)
	if err != nil {
		return usageError("%w", err)
	}
	dir, err := filepath.Abs(g.dir)
	if err != nil {
		return failure("%w", err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usageError("%s is not a folder (create the workspace first, e.g. fastagent init)", dir)
	}
	agentDir, err := resolveAgentDir(dir, g.agentDir)
	if err != nil {
		return failure("%w", err)
	}
	chanFile := filepath.Join(agentDir, workspace.ChannelsDir, slack.Kind+".yaml")
	if err := refuseExisting(chanFile, o.force); err != nil {
		return err
	}
	mfPath := filepath.Join(dir, manifestFile)
	if o.writeManifest {
		if err := refuseExisting(mfPath, o.force); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(chanFile), 0o755); err != nil {
		return failure("%w", err)
	}
	if err := os.WriteFile(chanFile, slack.ChannelFile(o.socket), 0o644); err != nil { //nolint:gosec // G306: holds no secret, only variable names
		return failure("write %s: %w", chanFile, err)
	}
	transport := "the Events API on POST /slack"
	if o.socket {
		transport = "Socket Mode"
	}
	fmt.Fprintf(out, "Wrote %s (%s).\n\n", chanFile, transport)
	written := ""
	if o.writeManifest {
		if err := os.WriteFile(mfPath, manifest, 0o644); err != nil { //nolint:gosec // G306: holds no secret
			return failure("write %s: %w", mfPath, err)
		}
		fmt.Fprintf(out, "Wrote the Slack app manifest to %s.\n\n", mfPath)
		written = mfPath
	} else {
		fmt.Fprintf(out, "Slack app manifest:\n---\n%s---\n\n", manifest)
	}
	fmt.Fprint(out, slack.InstallSteps(mo, written))
	return nil
}

// refuseExisting is a usage error when p exists and force is not set.
func refuseExisting(p string, force bool) error {
	_, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return failure("%w", err)
	case force:
		return nil
	default:
		return usageError("%s already exists; nothing was written (pass --force to overwrite it)", p)
	}
}

// resolveAgentDir is the agent dir of the workspace dir: --agent-dir, else
// fastagent.yaml's agentDir, else dir.
func resolveAgentDir(dir, flag string) (string, error) {
	if flag != "" {
		if filepath.IsAbs(flag) {
			return filepath.Clean(flag), nil
		}
		return filepath.Join(dir, flag), nil
	}
	cfg, err := workspace.LoadConfig(dir)
	if err != nil {
		return "", err
	}
	if cfg.AgentDir == "" {
		return dir, nil
	}
	if filepath.IsAbs(cfg.AgentDir) {
		return filepath.Clean(cfg.AgentDir), nil
	}
	return filepath.Join(dir, cfg.AgentDir), nil
}
