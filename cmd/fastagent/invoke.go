package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/httpagent"
)

func newInvoke(g *globals) *cobra.Command {
	var (
		session string
		url     string
		key     string
		jsonOut bool
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
			a := &httpagent.Agent{BaseURL: url, Reconnects: 5, ResumeWithin: httpagent.DefaultResumeWithin, Token: g.apiToken()}
			return runInvoke(ctx, a, session, text, jsonOut, os.Stdout, os.Stderr)
		},
	}
	cmd.Flags().StringVarP(&session, "session", "s", os.Getenv("FASTAGENT_SESSION"), "session ID [FASTAGENT_SESSION]")
	cmd.Flags().StringVar(&url, "url", envOr("FASTAGENT_URL", fmt.Sprintf("http://127.0.0.1:%d", envInt("FASTAGENT_HTTP_PORT", 8787))), "fastagent HTTP address [FASTAGENT_URL]")
	cmd.Flags().StringVar(&key, "key", "", "idempotency key: resending the same key returns the same turn")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print every event as one JSON line instead")
	return cmd
}

func runInvoke(ctx context.Context, a agent.Agent, session, text string, jsonOut bool, stdout, stderr io.Writer) error {
	var term *agent.Event
	printedText := false
	for ev := range a.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: text}) {
		if jsonOut {
			b, _ := json.Marshal(ev)
			fmt.Fprintln(stdout, string(b))
		} else {
			switch ev.Type {
			case agent.TypeText:
				fmt.Fprint(stdout, ev.Delta)
				printedText = true
			case agent.TypeToolStarted:
				fmt.Fprintf(stderr, "→ %s %s\n", ev.Name, compact(ev.Args, 200))
			case agent.TypeToolEnded:
				mark := "✓"
				if ev.IsError {
					mark = "✗"
				}
				fmt.Fprintf(stderr, "%s %s\n", mark, firstLine(ev.Content, 200))
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
