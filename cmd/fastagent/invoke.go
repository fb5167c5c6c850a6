package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/httpagent"
	"github.com/fastagent/fastagent/workflows"
)

func newInvoke(g *globals) *cobra.Command {
	var (
		session   string
		url       string
		agentName string
		key       string
		jsonOut   bool
	)
	cmd := &cobra.Command{
		Use:   "invoke <text>",
		Short: "Run one turn on a running fastagent and stream the answer",
		Long: "Runs one turn over HTTP (POST /invoke) and streams the answer to stdout as it arrives;\n" +
			"tool activity and retries go to stderr. Exit 0 when the turn completed, 1 when it failed, 2 on usage errors.\n" +
			"Reads the prompt from stdin when <text> is \"-\".",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("invoke takes exactly one argument, the prompt text (or - to read stdin)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			text := args[0]
			if text == "-" {
				b, err := io.ReadAll(os.Stdin)
				if err != nil {
					return failure("read stdin: %w", err)
				}
				text = string(b)
			}
			if strings.TrimSpace(text) == "" {
				return usageError("the prompt is empty")
			}
			if session == "" {
				return usageError("--session is required (any string naming the conversation)")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			if key != "" {
				ctx = agent.WithIdempotencyKey(ctx, key)
			}
			// A dropped connection or a restarting ingress is resumed, not lost:
			// the server is asked to keep the turn running meanwhile.
			url := agentBase(url, agentName)
			a := &httpagent.Agent{BaseURL: url, Reconnects: 5, ResumeWithin: httpagent.DefaultResumeWithin, Token: g.apiToken()}
			var ask func(agent.Event)
			if !jsonOut && args[0] != "-" && isTerminal(os.Stdin) {
				ask = askApprovals(ctx, g.apiToken(), url, session, os.Stdin, os.Stderr)
			}
			return runInvoke(ctx, a, session, text, jsonOut, os.Stdout, os.Stderr, ask)
		},
	}
	cmd.Flags().StringVarP(&session, "session", "s", os.Getenv("FASTAGENT_SESSION"), "session ID [FASTAGENT_SESSION]")
	bindURL(cmd.Flags(), &url, &agentName)
	cmd.Flags().StringVar(&key, "key", "", "idempotency key: resending the same key returns the same turn")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print every event as one JSON line instead")
	return cmd
}

// runInvoke streams one turn to stdout (text) and stderr (tool lines,
// retries, approvals, questions); onApproval, when set, is told of each
// approval_requested and question_asked event after it was printed.
func runInvoke(ctx context.Context, a agent.Agent, session, text string, jsonOut bool, stdout, stderr io.Writer, onApproval func(agent.Event)) error {
	var term *agent.Event
	printedText := false
	subs := subAgentLines{}
	for ev := range a.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: text}) {
		if jsonOut {
			b, _ := json.Marshal(ev)
			fmt.Fprintln(stdout, string(b))
		} else {
			switch ev.Type {
			case agent.TypeText:
				fmt.Fprint(stdout, ev.Delta)
				printedText = true
			case agent.TypeApprovalRequested, agent.TypeApprovalResolved, agent.TypeQuestionAsked, agent.TypeQuestionAnswered:
				if printedText {
					fmt.Fprintln(stdout)
					printedText = false
				}
				printApprovalEvent(stderr, session, ev, onApproval != nil)
				if onApproval != nil && (ev.Type == agent.TypeApprovalRequested || ev.Type == agent.TypeQuestionAsked) {
					onApproval(ev)
				}
			case agent.TypeToolStarted:
				fmt.Fprintf(stderr, "→ %s %s\n", ev.Name, compact(ev.Args, 200))
			case agent.TypeDelegated:
				subs.print(stderr, ev)
			case agent.TypeToolProgress:
				fmt.Fprintf(stderr, "  … %s\n", firstLine(ev.Content, 200))
			case agent.TypeToolEnded:
				subs.flush(stderr, ev.ID)
				mark := "✓"
				if ev.IsError {
					mark = "✗"
				}
				fmt.Fprintf(stderr, "%s %s\n", mark, firstLine(ev.Content, 200))
			case agent.TypeHook:
				// A hook that only allowed is not worth a line.
				if ev.Decision != "allow" || ev.Error != "" {
					if printedText {
						fmt.Fprintln(stdout)
						printedText = false
					}
					fmt.Fprintln(stderr, hookLine(ev))
				}
			case agent.TypeRetrying:
				if printedText {
					fmt.Fprintln(stdout)
				}
				fmt.Fprintf(stderr, "↻ retrying (attempt %d of %d): %s — the partial answer above is discarded\n", ev.Attempt, ev.MaxAttempts, ev.Reason)
				printedText = false
			}
		}
		if ev.IsTerminal() {
			e := ev
			term = &e
		}
	}
	if !jsonOut && printedText {
		fmt.Fprintln(stdout)
	}
	switch {
	case term == nil && ctx.Err() != nil:
		return failure("interrupted")
	case term == nil:
		return failure("the stream ended without a result")
	case term.Type == agent.TypeFailed:
		var msg string
		if term.Code != "" {
			msg = fmt.Sprintf("%s (code %s, retryable %v)", term.Details, term.Code, term.Retryable)
		} else {
			msg = fmt.Sprintf("%s (retryable %v)", term.Details, term.Retryable)
		}
		return failure("turn failed: %s", msg)
	}
	return nil
}

// printApprovalEvent shows a call waiting for approval (with how to
// answer it unless asked inline) or the decision on it.
func printApprovalEvent(w io.Writer, session string, ev agent.Event, inline bool) {
	switch ev.Type {
	case agent.TypeQuestionAsked:
		if ev.Agent != "" {
			fmt.Fprintf(w, "? the %s sub-agent asks: %s\n", ev.Agent, ev.Question)
		} else {
			fmt.Fprintf(w, "? the agent asks: %s\n", ev.Question)
		}
		if !inline {
			fmt.Fprintf(w, "  answer: fastagent session answer %s %s \"<your answer>\"\n", session, ev.ID)
		}
		return
	case agent.TypeQuestionAnswered:
		if ev.TimedOut {
			fmt.Fprintf(w, "⌛ no answer came in time; the agent goes on without it\n")
		}
		return
	}
	if ev.Type == agent.TypeApprovalResolved {
		switch {
		case ev.TimedOut:
			fmt.Fprintf(w, "⌛ call %s denied: %s\n", ev.ID, ev.Reason)
		case ev.Approved:
			fmt.Fprintf(w, "✓ call %s approved%s\n", ev.ID, byWhom(ev.By))
		default:
			fmt.Fprintf(w, "✗ call %s denied%s%s\n", ev.ID, byWhom(ev.By), reasonText(ev.Reason))
		}
		return
	}
	fmt.Fprintf(w, "⏸ the agent wants to run a tool that needs your approval:\n")
	printApproval(w, pendingOf(ev))
	if !inline {
		fmt.Fprintf(w, "  answer: fastagent session approve %s %s [--deny]\n", session, ev.ID)
	}
}

// pendingOf is the waiting call an approval_requested event describes.
func pendingOf(ev agent.Event) workflows.PendingApproval {
	return workflows.PendingApproval{Call: ev.ID, Tool: ev.Name, Args: ev.Args, ArgsHash: ev.ArgsHash,
		DefinitionHash: ev.DefinitionHash, Approvers: ev.Approvers, Deadline: ev.Deadline, Agent: ev.Agent}
}

func byWhom(by string) string {
	if by == "" {
		return ""
	}
	return " by " + by
}

func reasonText(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// askApprovals returns what `fastagent invoke` does with a call waiting for
// approval when a person is at the terminal: asks y/n and answers it, bound
// to the hashes shown.
func askApprovals(ctx context.Context, token, base, session string, in io.Reader, out io.Writer) func(agent.Event) {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return func(ev agent.Event) {
		if ev.Type == agent.TypeQuestionAsked {
			fmt.Fprintf(out, "your answer: ")
			select {
			case <-ctx.Done():
			case line := <-lines:
				body, _ := json.Marshal(map[string]string{"text": line})
				if _, err := call(token, "POST", strings.TrimRight(base, "/")+"/sessions/"+url.PathEscape(session)+"/answers/"+url.PathEscape(ev.ID), string(body)); err != nil {
					fmt.Fprintf(out, "✗ %v\n", err)
				}
			}
			return
		}
		fmt.Fprintf(out, "approve? [y/n] ")
		select {
		case <-ctx.Done():
			return
		case line := <-lines:
			approve := strings.HasPrefix(strings.ToLower(strings.TrimSpace(line)), "y")
			body := approvalBody(pendingOf(ev), approve, "denied in fastagent invoke")
			if _, err := call(token, "POST", strings.TrimRight(base, "/")+"/sessions/"+url.PathEscape(session)+"/approvals/"+url.PathEscape(ev.ID), body); err != nil {
				fmt.Fprintf(out, "✗ %v\n", err)
			}
		}
	}
}

// approvalBody is the POST /sessions/{id}/approvals/{call} body deciding p,
// bound to the hashes that were shown.
func approvalBody(p workflows.PendingApproval, approve bool, denial string) string {
	req := map[string]any{"approve": approve, "argsHash": p.ArgsHash, "definitionHash": p.DefinitionHash}
	if !approve {
		req["reason"] = denial
	}
	b, _ := json.Marshal(req)
	return string(b)
}

func compact(b json.RawMessage, n int) string {
	return firstLine(strings.Join(strings.Fields(string(b)), " "), n)
}

func firstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// subAgentLines prints the progress of sub-agents (delegated events) as
// "agent: …" lines, text gathered into whole lines per delegate call.
type subAgentLines map[string]*subAgentLine

// subAgentLine is the text of a delegate call's sub-agent not yet printed.
type subAgentLine struct {
	who  string
	text strings.Builder
}

// hookLine is a hook event as invoke prints it: which hook, where, what it
// decided and why, and whether it failed.
func hookLine(ev agent.Event) string {
	s := "⚑ hook " + ev.Hook
	if ev.Hook == "" {
		s = "⚑ hooks"
	}
	s += " (" + ev.HookEvent
	if ev.ID != "" {
		s += " " + ev.ID
	}
	s += "): " + ev.Decision
	if ev.Reason != "" {
		s += " — " + firstLine(ev.Reason, 200)
	}
	if ev.Error != "" {
		s += " (failed: " + firstLine(ev.Error, 200) + ")"
	}
	return s
}

func (l subAgentLines) print(w io.Writer, ev agent.Event) {
	if ev.Sub == nil {
		return
	}
	key, who, sub := ev.ID, ev.Agent, *ev.Sub
	for sub.Type == agent.TypeDelegated && sub.Sub != nil { // a sub-agent's own sub-agent
		key, who, sub = key+"/"+sub.ID, who+"/"+sub.Agent, *sub.Sub
	}
	switch sub.Type {
	case agent.TypeText:
		line := l[key]
		if line == nil {
			line = &subAgentLine{who: who}
			l[key] = line
		}
		line.text.WriteString(sub.Delta)
		text := line.text.String()
		if i := strings.LastIndexByte(text, '\n'); i >= 0 {
			for _, part := range strings.Split(text[:i], "\n") {
				fmt.Fprintf(w, "  %s: %s\n", who, part)
			}
			line.text.Reset()
			line.text.WriteString(text[i+1:])
		}
	case agent.TypeToolStarted:
		fmt.Fprintf(w, "  %s → %s %s\n", who, sub.Name, compact(sub.Args, 120))
	case agent.TypeToolEnded:
		l.flush(w, key+"/"+sub.ID)
	}
}

// flush prints what is left of the text of delegate call id's sub-agent
// and of its own sub-agents.
func (l subAgentLines) flush(w io.Writer, id string) {
	for _, key := range slices.Sorted(maps.Keys(l)) {
		if key != id && !strings.HasPrefix(key, id+"/") {
			continue
		}
		if line := l[key]; line.text.Len() > 0 {
			fmt.Fprintf(w, "  %s: %s\n", line.who, line.text.String())
		}
		delete(l, key)
	}
}
