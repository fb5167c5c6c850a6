package main

import "github.com/spf13/cobra"

// newAdd is the parent of the commands that add a channel to the agent
// (each writes channels/<kind>.yaml and prints the platform's setup steps).
func newAdd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add a channel to the agent (writes channels/<kind>.yaml and prints the setup steps)",
	}
	cmd.AddCommand(newAddFeishu(g)...)
	return cmd
}
