package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/ingress"
)

// newChatLink is `fastagent chat-link`: a one-time login link to the web
// chat of a running ingress, for the principal of the API token.
func newChatLink(g *globals) *cobra.Command {
	var (
		base, agentName string
		ttl             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "chat-link",
		Short: "Print a one-time login link to the web chat of a running server (for the principal of your API token)",
		Long: "Asks the server at --url for a login link to its web chat (<url>/chat/), signed in as the principal of\n" +
			"FASTAGENT_API_TOKEN (or the token `fastagent dev` wrote in the state dir). The link works once, within --ttl\n" +
			"(at most 1h), and only until the server restarts. Opening it sets the chat's session cookie and opens the page.\n" +
			"With --agent the page talks to that agent of a deployment serving several.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl <= 0 || ttl > ingress.MaxChatLinkTTL {
				return usageError("--ttl %s: want a duration up to %s", ttl, ingress.MaxChatLinkTTL)
			}
			l, err := ingress.RequestChatLink(cmd.Context(), &http.Client{Timeout: 30 * time.Second}, base, g.apiToken(),
				ingress.ChatLinkRequest{Agent: agentName, TTL: ttl.String()})
			if err != nil {
				return failure("chat link: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), l.URL)
			fmt.Fprintf(cmd.ErrOrStderr(), "opens once, until %s\n", l.Expires.Local().Format(time.Kitchen))
			return nil
		},
	}
	bindURL(cmd.Flags(), &base, &agentName)
	cmd.Flags().DurationVar(&ttl, "ttl", ingress.DefaultChatLinkTTL, "how long the link opens (at most 1h)")
	return cmd
}
