package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/channels/github"
	"github.com/fastagent/fastagent/internal/workspace"
)

// addGitHubOptions are the flags of `add github`.
type addGitHubOptions struct {
	bot, url   string
	app, force bool
}

func newAddGitHub(g *globals) *cobra.Command {
	o := &addGitHubOptions{}
	cmd := &cobra.Command{
		Use:   "github",
		Short: "Write channels/github.yaml and print the webhook and token (or GitHub App) setup steps",
		Long: "Writes channels/github.yaml in the agent dir (never over an existing one without --force): a comment\n" +
			"mentioning --bot, or the label \"agent\" added to an issue, is a turn in the issue's session, answered\n" +
			"as a comment. Then prints the webhook (<url>/github, its secret, its events) and credential steps.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAddGitHub(g, o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.bot, "bot", "fastagent-bot", "the login the agent posts as (an App's is <app-slug>[bot]); mentions of it are turns")
	f.StringVar(&o.url, "url", "", "public https base URL of the ingress; the webhook URL is <url>/github")
	f.BoolVar(&o.app, "app", false, "authenticate as a GitHub App (GITHUB_APP_ID + GITHUB_APP_PRIVATE_KEY) instead of GITHUB_TOKEN")
	f.BoolVar(&o.force, "force", false, "overwrite an existing channels/github.yaml")
	return cmd
}

func runAddGitHub(g *globals, o *addGitHubOptions, out io.Writer) error {
	file, err := github.ChannelFile(o.bot)
	if err != nil {
		return usageError("--%w", err)
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
	chanFile := filepath.Join(agentDir, workspace.ChannelsDir, github.Kind+".yaml")
	if err := refuseExisting(chanFile, o.force); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(chanFile), 0o755); err != nil {
		return failure("%w", err)
	}
	if err := os.WriteFile(chanFile, file, 0o644); err != nil { //nolint:gosec // G306: holds no secret, only rules
		return failure("write %s: %w", chanFile, err)
	}
	fmt.Fprintf(out, "Wrote %s (webhook on POST %s).\n\n", chanFile, github.Path)
	fmt.Fprint(out, github.SetupSteps(o.url, o.app))
	return nil
}
