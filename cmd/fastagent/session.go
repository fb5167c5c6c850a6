package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// newSession is the control plane over HTTP: show, wakes, abort, steer, compact, approve.
func newSession(g *globals) *cobra.Command {
	var base string
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Inspect and control a session on a running fastagent (state, wake-ups, abort, steer, compact, approvals)",
	}
	cmd.PersistentFlags().StringVar(&base, "url", envOr("FASTAGENT_URL", fmt.Sprintf("http://127.0.0.1:%d", envInt("FASTAGENT_HTTP_PORT", 8787))), "fastagent HTTP address [FASTAGENT_URL]")
	one := func(use, short string, run func(id string, args []string) error, nargs int) *cobra.Command {
		return &cobra.Command{
			Use:   use,
			Short: short,
			Args: func(_ *cobra.Command, args []string) error {
				if len(args) != nargs {
					return usageError("usage: fastagent session %s", use)
				}
				return nil
			},
			RunE: func(_ *cobra.Command, args []string) error { return run(args[0], args[1:]) },
		}
	}
	call := func(method, u, body string) ([]byte, error) { return call(g.apiToken(), method, u, body) }
	path := func(id, rest string) string {
		return strings.TrimRight(base, "/") + "/sessions/" + url.PathEscape(id) + rest
	}
	cmd.AddCommand(
		one("show <session>", "Print the session's state as JSON", func(id string, _ []string) error {
			body, err := call(http.MethodGet, path(id, ""), "")
			if err != nil {
				return err
			}
			_, err = os.Stdout.Write(append(body, '\n'))
			return err
		}, 1),
		one("wakes <session>", "List the session's pending wake-ups and the last ones that fired", func(id string, _ []string) error {
			body, err := call(http.MethodGet, path(id, ""), "")
			if err != nil {
				return err
			}
			var v struct {
				Wakes []struct {
					ID, Prompt, Cron, TZ string
					FireAt               time.Time
					Fired                int
				} `json:"wakes"`
				WakeLog []struct {
					ID, Turn, Status, Details string
					FiredAt                   time.Time
				} `json:"wakeLog"`
			}
			if err := json.Unmarshal(body, &v); err != nil {
				return failure("unexpected answer: %w", err)
			}
			tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNEXT\tREPEATS\tPROMPT")
			for _, w := range v.Wakes {
				rep := "once"
				if w.Cron != "" {
					rep = w.Cron + " " + w.TZ
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", w.ID, w.FireAt.Local().Format(time.RFC3339), rep, firstLine(w.Prompt, 60))
			}
			tw.Flush()
			if len(v.WakeLog) > 0 {
				fmt.Println("\nfired:")
				for _, r := range v.WakeLog {
					fmt.Printf("  %s  %s  %s %s\n", r.FiredAt.Local().Format(time.RFC3339), r.ID, r.Status, firstLine(r.Details, 80))
				}
			}
			return nil
		}, 1),
		one("abort <session>", "Stop the session's running turn", func(id string, _ []string) error {
			body, err := call(http.MethodPost, path(id, "/abort"), `{"reason":"aborted from the command line"}`)
			if err == nil {
				fmt.Println(string(body))
			}
			return err
		}, 1),
		one("steer <session> <text>", "Send a message the running turn reads after its current step", func(id string, args []string) error {
			b, _ := json.Marshal(map[string]string{"text": args[0]})
			_, err := call(http.MethodPost, path(id, "/steer"), string(b))
			return err
		}, 2),
		one("compact <session>", "Compact the session's context now: summarize its older part, keep the newest messages", func(id string, _ []string) error {
			body, err := call(http.MethodPost, path(id, "/compact"), `{}`)
			if err != nil {
				return err
			}
			var v struct {
				Compacted bool `json:"compacted"`
				Result    struct {
					EntryID      string `json:"entryId"`
					FirstKept    string `json:"firstKept"`
					TokensBefore int    `json:"tokensBefore"`
					TokensAfter  int    `json:"tokensAfter"`
					Summarized   int    `json:"summarized"`
					Skipped      string `json:"skipped"`
				} `json:"result"`
			}
			if err := json.Unmarshal(body, &v); err != nil {
				return failure("unexpected answer: %w", err)
			}
			r := v.Result
			if !v.Compacted {
				fmt.Printf("nothing compacted: %s\n", r.Skipped)
				return nil
			}
			fmt.Printf("compacted: %d messages summarized, ~%d → ~%d tokens; entry %s keeps from %s\n",
				r.Summarized, r.TokensBefore, r.TokensAfter, r.EntryID, r.FirstKept)
			return nil
		}, 1),
		one("approve <session> <call>", "Approve a tool call waiting for approval", func(id string, args []string) error {
			_, err := call(http.MethodPost, path(id, "/approvals/"+url.PathEscape(args[0])), `{"approve":true}`)
			return err
		}, 2),
		one("deny <session> <call>", "Deny a tool call waiting for approval", func(id string, args []string) error {
			_, err := call(http.MethodPost, path(id, "/approvals/"+url.PathEscape(args[0])), `{"approve":false,"reason":"denied from the command line"}`)
			return err
		}, 2),
	)
	return cmd
}

// call does one control-plane request; non-2xx answers become failures
// carrying the server's message.
func call(token, method, u, body string) ([]byte, error) {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return nil, usageError("%w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, failure("cannot reach %s: %w (is `fastagent dev` running?)", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode/100 != 2 {
		var e struct{ Error, Code string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, failure("%s (%s)", e.Error, e.Code)
		}
		return nil, failure("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}
