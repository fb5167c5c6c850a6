package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/uigate"
)

// newUILink prints a new one-time login link to the Web UI of a running
// `fastagent dev`, signed with the key in its state dir.
func newUILink(g *globals) *cobra.Command {
	var uiPort int
	cmd := &cobra.Command{
		Use:   "ui-link",
		Short: "Print a new one-time login link to the Web UI of a running `fastagent dev`",
		Long: "The embedded Web UI answers only a browser that opened a login link. `fastagent dev` prints one\n" +
			"at start; each works once. This prints another, signed with the key in <state-dir>/" + tclient.DevTokenFile + ".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if uiPort <= 0 || uiPort > 65535 {
				return usageError("--ui-port %d is not a TCP port", uiPort)
			}
			key, err := os.ReadFile(filepath.Join(g.stateDirOrDefault(), tclient.DevTokenFile))
			if err != nil {
				return failure("no key of a running `fastagent dev`: %w (run it in this directory, or pass --dir / --state-dir)", err)
			}
			base := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(uiPort))
			if err := uiAnswers(base); err != nil {
				return failure("no Web UI at %s: %w (is `fastagent dev` running, with this --ui-port?)", base, err)
			}
			link, err := uigate.LoginURL(base, strings.TrimSpace(string(key)))
			if err != nil {
				return failure("%w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), link)
			return nil
		},
	}
	cmd.Flags().IntVar(&uiPort, "ui-port", envInt("FASTAGENT_UI_PORT", 8233), "the Web UI port `fastagent dev` was given [FASTAGENT_UI_PORT]")
	return cmd
}

// uiAnswers checks that something serves HTTP at base.
func uiAnswers(base string) error {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(base + uigate.LoginPath)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
