package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/workflows"
)

// approvalClient reads and decides a session's pending approvals over HTTP.
type approvalClient struct {
	// base points at the --url flag's value.
	base *string
	call func(method, u, body string) ([]byte, error)
}

func (c approvalClient) sessionURL(id, rest string) string {
	return strings.TrimRight(*c.base, "/") + "/sessions/" + url.PathEscape(id) + rest
}

// view reads the session's state: the calls waiting for approval and the
// questions waiting for an answer.
func (c approvalClient) view(id string) (workflows.SessionView, error) {
	var v workflows.SessionView
	body, err := c.call(http.MethodGet, c.sessionURL(id, ""), "")
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, failure("unexpected answer: %w", err)
	}
	return v, nil
}

// pending lists the session's tool calls waiting for approval.
func (c approvalClient) pending(id string) ([]workflows.PendingApproval, error) {
	v, err := c.view(id)
	return v.Approvals, err
}

// newSessionApprovals is `session approvals`: what an approver decides on,
// and the questions the agent waits on.
func newSessionApprovals(c *approvalClient) *cobra.Command {
	return &cobra.Command{
		Use:   "approvals <session>",
		Short: "List the tool calls waiting for approval (their arguments and the hashes an approval binds to) and the questions waiting for an answer",
		Args:  exactArgs(1, "approvals <session>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := c.view(args[0])
			if err != nil {
				return err
			}
			ps := v.Approvals
			out := cmd.OutOrStdout()
			if len(ps) == 0 {
				fmt.Fprintf(out, "no tool call of %s is waiting for approval\n", args[0])
			}
			for _, p := range ps {
				printApproval(out, p)
			}
			for _, q := range v.Questions {
				who := ""
				if q.Agent != "" {
					who = " · sub-agent " + q.Agent
				}
				fmt.Fprintf(out, "question %s%s · turn %s: %s\n  answer: fastagent session answer %s %s \"<your answer>\"\n", q.Call, who, q.Turn, q.Question, args[0], q.Call)
			}
			return nil
		},
	}
}

// newSessionApprove is `session approve`: it shows the call it approves and
// sends the hashes of what it showed (or of what --args-hash and
// --definition-hash name), so a call that changed meanwhile is refused.
func newSessionApprove(c *approvalClient) *cobra.Command {
	var argsHash, defHash, edited string
	cmd := &cobra.Command{
		Use:   "approve <session> <call>",
		Short: "Approve a tool call waiting for approval (shows it; refused if it is no longer the call shown)",
		Args:  exactArgs(2, "approve <session> <call>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, callID := args[0], args[1]
			var editedArgs map[string]json.RawMessage
			if edited != "" {
				if err := json.Unmarshal([]byte(edited), &editedArgs); err != nil || editedArgs == nil {
					return usageError("--args must be the call's arguments as one JSON object, e.g. --args '{\"command\":\"ls\"}'")
				}
			}
			ps, err := c.pending(id)
			if err != nil {
				return err
			}
			var shown *workflows.PendingApproval
			for i := range ps {
				if ps[i].Call == callID {
					shown = &ps[i]
				}
			}
			if shown == nil {
				return failure("no tool call %q of session %s is waiting for approval (fastagent session approvals %s)", callID, id, id)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, "approving:")
			printApproval(out, *shown)
			req := map[string]any{"approve": true, "argsHash": shown.ArgsHash, "definitionHash": shown.DefinitionHash}
			if argsHash != "" {
				req["argsHash"] = argsHash
			}
			if defHash != "" {
				req["definitionHash"] = defHash
			}
			if editedArgs != nil {
				req["args"] = editedArgs
				fmt.Fprintf(out, "with edited arguments:\n    %s\n", edited)
			}
			b, _ := json.Marshal(req)
			if _, err := c.call(http.MethodPost, c.sessionURL(id, "/approvals/"+url.PathEscape(callID)), string(b)); err != nil {
				return err
			}
			if editedArgs != nil {
				fmt.Fprintf(out, "approved %s with edits\n", callID)
			} else {
				fmt.Fprintf(out, "approved %s\n", callID)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&argsHash, "args-hash", "", "approve only if the call's arguments still have this hash (as `session approvals` showed it)")
	cmd.Flags().StringVar(&defHash, "definition-hash", "", "approve only if the tool's definition still has this hash")
	cmd.Flags().StringVar(&edited, "args", "", "approve with edits: run the call with these arguments (one JSON object, in place of the model's); the model is told what changed")
	return cmd
}

// printApproval writes one pending call: tool, call, turn, its full
// arguments (indented JSON) and both hashes.
func printApproval(w io.Writer, p workflows.PendingApproval) {
	line := fmt.Sprintf("call %s · tool %s", p.Call, p.Tool)
	if p.Agent != "" {
		line += " · sub-agent " + p.Agent
	}
	if p.Turn != "" {
		line += " · turn " + p.Turn
	}
	fmt.Fprintln(w, line)
	var args bytes.Buffer
	if err := json.Indent(&args, p.Args, "    ", "  "); err != nil {
		args.Reset()
		args.Write(p.Args)
	}
	fmt.Fprintf(w, "  arguments:\n    %s\n", args.String())
	fmt.Fprintf(w, "  argsHash:       %s\n", orNone(p.ArgsHash))
	fmt.Fprintf(w, "  definitionHash: %s\n", orNone(p.DefinitionHash))
	if len(p.Approvers) > 0 {
		fmt.Fprintf(w, "  approvers:      %s\n", strings.Join(p.Approvers, ", "))
	}
	if !p.Deadline.IsZero() {
		fmt.Fprintf(w, "  deadline:       %s (denied if no one decides by then)\n", p.Deadline.Local().Format("2006-01-02 15:04:05 MST"))
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// exactArgs refuses any other number of arguments with the usage line.
func exactArgs(n int, use string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError("usage: fastagent session %s", use)
		}
		return nil
	}
}
