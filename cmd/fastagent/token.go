package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/ingress"
)

// newToken prints a new API token and the tokens-file line that accepts it.
func newToken() *cobra.Command {
	var (
		principal string
		rights    string
		agents    []string
	)
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make a new API token and print it with its tokens-file line (the line holds only its hash)",
		Long: "Prints a new random API token (give it to the client: FASTAGENT_API_TOKEN or Authorization: Bearer)\n" +
			"and the line to add to the tokens file (--tokens-file) or FASTAGENT_API_TOKENS: principal:rights:sha256hex[:agents].\n" +
			"Rights: invoke, control (abort/steer/state/attach), approve, codec, metrics, admin (everything, every session).\n" +
			"With --agent, the token reaches only those agents of a deployment serving several; others answer 404.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if principal == "" || strings.ContainsAny(principal, ":;\n") {
				return usageError("--principal must be a name without ':' or ';'")
			}
			var rs []ingress.Right
			for _, r := range strings.Split(rights, ",") {
				rs = append(rs, ingress.Right(strings.TrimSpace(r)))
			}
			tok := ingress.NewToken()
			line := ingress.TokenLineFor(principal, tok, agents, rs...)
			var check ingress.Tokens
			if err := check.Parse(line); err != nil {
				return usageError("%w", err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "token: %s\nline:  %s\n", tok, line)
			return nil
		},
	}
	cmd.Flags().StringVar(&principal, "principal", "", "who the token acts for (sessions belong to it)")
	cmd.Flags().StringSliceVar(&agents, "agent", nil, "limit the token to these agents (repeatable or comma-separated; default: every agent)")
	cmd.Flags().StringVar(&rights, "rights", "invoke,control,approve", "comma-separated rights: invoke, control, approve, codec, metrics, admin")
	return cmd
}
