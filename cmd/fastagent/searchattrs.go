package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/workflows"
)

// newSearchAttributes is `fastagent search-attributes create|check`.
func newSearchAttributes(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "search-attributes",
		Short: "Register the session search attributes (FastAgentAgent, FastAgentChannel, …) on a Temporal namespace",
		Long: "Sessions carry Keyword search attributes so they can be found in the Web UI and with\n" +
			"`fastagent session list --channel … --status …`: " + strings.Join(workflows.SearchAttributeNames(), ", ") + ".\n" +
			"The embedded server of `fastagent dev` registers them at start; on another cluster register them once\n" +
			"per namespace with `fastagent search-attributes create` (or `temporal operator search-attribute create`;\n" +
			"on Temporal Cloud, `tcld namespace search-attributes add` or the Cloud UI). Until they are registered,\n" +
			"sessions run without them.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usageError("search-attributes needs a subcommand: create or check (see fastagent search-attributes --help)")
		},
	}
	create := &temporalFlags{}
	createCmd := &cobra.Command{
		Use:   "create",
		Short: "Register the session search attributes the namespace lacks (an operator call; no-op when all are there)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := create.connect(cmd, g)
			if err != nil {
				return err
			}
			defer done()
			added, err := sessionstart.Register(ctx, c, create.temporal.Namespace)
			if err != nil {
				return failure("%w", err)
			}
			if len(added) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "namespace %s has every session search attribute\n", create.temporal.Namespace)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "registered on namespace %s: %s\n", create.temporal.Namespace, strings.Join(added, ", "))
			return nil
		},
	}
	create.bind(createCmd)
	check := &temporalFlags{}
	checkCmd := &cobra.Command{
		Use:   "check",
		Short: "Say which session search attributes the namespace lacks (exit status 1 when any)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := check.connect(cmd, g)
			if err != nil {
				return err
			}
			defer done()
			missing, err := sessionstart.Missing(ctx, c, check.temporal.Namespace)
			if err != nil {
				return failure("%w", err)
			}
			if len(missing) > 0 {
				return failure("namespace %s lacks %s; run `fastagent search-attributes create`", check.temporal.Namespace, strings.Join(missing, ", "))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "namespace %s has every session search attribute\n", check.temporal.Namespace)
			return nil
		},
	}
	check.bind(checkCmd)
	cmd.AddCommand(createCmd, checkCmd)
	return cmd
}
