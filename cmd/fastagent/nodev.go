//go:build nodevserver

package main

import "github.com/spf13/cobra"

// devCommand in a build without the embedded server explains the choice.
func devCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Not available in this build (built without the embedded Temporal server)",
		RunE: func(*cobra.Command, []string) error {
			return usageError("this fastagent binary was built without the embedded Temporal server (tag nodevserver); use `fastagent start --temporal-address …`, or a full build for `dev`")
		},
	}
}
