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
		Short: "Inspect, control and move sessions on a running fastagent (list, transcript, export/import, rewind, follow-ups, state, abort, steer, compact, approvals)",
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
	approvals := &approvalClient{base: &base, call: call}
	var tree bool
	var out, as, cursor string
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List your sessions (every session with an admin token), most recently active first",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			q := url.Values{}
			if limit > 0 {
				q.Set("limit", fmt.Sprint(limit))
			}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			body, err := call(http.MethodGet, strings.TrimRight(base, "/")+"/sessions?"+q.Encode(), "")
			if err != nil {
				return err
			}
			var v struct {
				Sessions []struct {
					Session, Owner, Status string
					Turns, Entries         int
					Updated                time.Time
				} `json:"sessions"`
				NextCursor string `json:"nextCursor"`
			}
			if err := json.Unmarshal(body, &v); err != nil {
				return failure("unexpected answer: %w", err)
			}
			tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tOWNER\tSTATUS\tTURNS\tENTRIES\tLAST ACTIVITY")
			for _, si := range v.Sessions {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", si.Session, si.Owner, si.Status, si.Turns, si.Entries, si.Updated.Local().Format(time.RFC3339))
			}
			tw.Flush()
			if v.NextCursor != "" {
				fmt.Printf("\nmore: fastagent session list --cursor %s\n", v.NextCursor)
			}
			return nil
		},
	}
	list.Flags().IntVar(&limit, "limit", 0, "sessions per page (default 50)")
	list.Flags().StringVar(&cursor, "cursor", "", "continue a listing (the cursor the last page printed)")
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
		one("deny <session> <call>", "Deny a tool call waiting for approval", func(id string, args []string) error {
			_, err := call(http.MethodPost, path(id, "/approvals/"+url.PathEscape(args[0])), `{"approve":false,"reason":"denied from the command line"}`)
			return err
		}, 2),
		one("transcript <session>", "Print the session's current branch (--tree: every entry) as JSON", func(id string, _ []string) error {
			rest := "/transcript"
			if tree {
				rest += "?tree=1"
			}
			body, err := call(http.MethodGet, path(id, rest), "")
			if err == nil {
				_, err = os.Stdout.Write(append(body, '\n'))
			}
			return err
		}, 1),
		one("rewind <session> <entry>", "Move the session's leaf back to an entry; the abandoned branch is summarized for the model", func(id string, args []string) error {
			b, _ := json.Marshal(map[string]string{"entry": args[0]})
			body, err := call(http.MethodPost, path(id, "/rewind"), string(b))
			if err != nil {
				return err
			}
			var v struct {
				Leaf, SummaryEntry string
				Abandoned          int
			}
			if err := json.Unmarshal(body, &v); err != nil {
				return failure("unexpected answer: %w", err)
			}
			fmt.Printf("rewound to %s: %d messages abandoned; leaf %s\n", args[0], v.Abandoned, v.Leaf)
			return nil
		}, 2),
		one("followup <session> <text>", "Queue a message that runs as a turn after the current one; prints the turn key", func(id string, args []string) error {
			b, _ := json.Marshal(map[string]string{"text": args[0]})
			body, err := call(http.MethodPost, path(id, "/followup"), string(b))
			if err != nil {
				return err
			}
			var v struct{ Turn, Events string }
			if err := json.Unmarshal(body, &v); err != nil {
				return failure("unexpected answer: %w", err)
			}
			fmt.Printf("queued turn %s (follow it: GET %s)\n", v.Turn, v.Events)
			return nil
		}, 2),
		one("export <session>", "Write the session as a pi JSONL session file (stdout, or -o file)", func(id string, _ []string) error {
			body, err := call(http.MethodGet, path(id, "/export"), "")
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = os.Stdout.Write(body)
				return err
			}
			if err := os.WriteFile(out, body, 0o600); err != nil {
				return failure("write %s: %w", out, err)
			}
			fmt.Fprintf(os.Stderr, "exported %s to %s\n", id, out)
			return nil
		}, 1),
		one("import <file>", "Create a durable session from a pi JSONL session file (--as names it; default: the file's session id)", func(file string, _ []string) error {
			data, err := os.ReadFile(file)
			if err != nil {
				return usageError("read %s: %w", file, err)
			}
			b, _ := json.Marshal(map[string]string{"session": as, "jsonl": string(data)})
			body, err := call(http.MethodPost, strings.TrimRight(base, "/")+"/sessions/import", string(b))
			if err != nil {
				return err
			}
			var v struct {
				Session, Leaf string
				Entries       int
			}
			if err := json.Unmarshal(body, &v); err != nil {
				return failure("unexpected answer: %w", err)
			}
			fmt.Printf("imported session %s: %d entries, leaf %s\n", v.Session, v.Entries, v.Leaf)
			return nil
		}, 1),
		list,
		newSessionApprovals(approvals),
		newSessionApprove(approvals),
	)
	for _, c := range cmd.Commands() {
		switch c.Name() {
		case "transcript":
			c.Flags().BoolVar(&tree, "tree", false, "every entry of the session, not only the current branch")
		case "export":
			c.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
		case "import":
			c.Flags().StringVar(&as, "as", "", "the new session's ID (default: the file's session id)")
		}
	}
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
