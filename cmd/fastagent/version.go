package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/buildinfo"
)

// newVersion is `fastagent version`: version, build ID, Temporal SDK and
// server versions, Go version.
func newVersion() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, build ID, Temporal SDK and server versions and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := buildinfo.Read()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			_, err := fmt.Fprint(cmd.OutOrStdout(), info)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
