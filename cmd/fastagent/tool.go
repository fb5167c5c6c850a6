package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/tools"
)

// newTool is `fastagent tool <name> ['<json>']`.
func newTool(g *globals) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "tool <name> ['<json>']",
		Short: "Run one tool directly in the workspace (no model, no Temporal)",
		Long: "Runs the named tool of the agent with the given JSON arguments (default {}; - reads them from stdin)\n" +
			"in the working directory, and prints the result to stdout.\n" +
			"Exit 0 on success, 1 when the tool returns an error result or the definition does not load,\n" +
			"2 when the tool is unknown or the arguments are not valid for it.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageError(`tool takes a tool name and optionally its JSON arguments, e.g. fastagent tool read '{"path": "README.md"}'`)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTool(cmd, g, args, jsonOut)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the whole result (content, isError, details) as JSON")
	return cmd
}

// runTool runs one tool of the loaded definition with the arguments of
// args and prints its result; a tool error result fails the command.
func runTool(cmd *cobra.Command, g *globals, args []string, jsonOut bool) error {
	name, raw, err := toolArgs(cmd.InOrStdin(), args)
	if err != nil {
		return err
	}
	def, err := loadDefinition(cmd.Context(), g)
	if err != nil {
		return err
	}
	defer def.Close()
	for _, d := range def.Diagnostics {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", d.String())
	}
	t, ok := def.Tool(name)
	if !ok {
		var names []string
		for _, e := range def.Tools {
			names = append(names, e.Tool.Spec().Name)
		}
		return usageError("no tool named %q (tools: %s)", name, strings.Join(names, ", "))
	}
	spec := t.Spec()
	if err := tools.ValidateArgs(spec, json.RawMessage(raw)); err != nil {
		return usageError("%s", strings.TrimPrefix(err.Error(), "tools: "))
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	res, err := t.Run(ctx, agent.ToolCall{
		ID:      "cli",
		Name:    spec.Name,
		Args:    json.RawMessage(raw),
		Session: "cli",
		Dir:     def.Workspace.Dir,
	})
	if err != nil {
		return failure("tool %s could not run: %w", name, err)
	}
	if err := printToolResult(cmd.OutOrStdout(), res, jsonOut); err != nil {
		return err
	}
	if res.IsError {
		return failure("tool %s returned an error", name)
	}
	return nil
}

// toolArgs are the tool's name and its JSON arguments: {} by default, read
// from stdin for "-".
func toolArgs(stdin io.Reader, args []string) (name, raw string, err error) {
	name, raw = args[0], "{}"
	if len(args) == 2 {
		raw = args[1]
	}
	if raw == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return "", "", failure("read stdin: %w", err)
		}
		raw = string(b)
	}
	return name, raw, nil
}

// printToolResult prints a tool's content (ending in a newline), or with
// jsonOut the whole result as JSON.
func printToolResult(out io.Writer, res agent.ToolResult, jsonOut bool) error {
	if jsonOut {
		b, err := json.Marshal(res)
		if err != nil {
			return failure("%w", err)
		}
		fmt.Fprintln(out, string(b))
		return nil
	}
	fmt.Fprint(out, res.Content)
	if !strings.HasSuffix(res.Content, "\n") {
		fmt.Fprintln(out)
	}
	return nil
}
