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
// sessionCmds holds the flags of `fastagent session` and runs its
// subcommands against the control-plane API.
type sessionCmds struct {
	g               *globals
	base            string
	tree            bool
	out, as, cursor string
	limit           int
	// filter selects sessions by their search attributes (list).
	filter struct{ principal, channel, status, parent string }
	// agent is --agent: the agent whose sessions these are.
	agent string
	// force is rm --force: delete a session that is running a turn.
	force bool
}

func newSession(g *globals) *cobra.Command {
	sc := &sessionCmds{g: g}
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Inspect, control, move and delete sessions on a running fastagent (list, transcript, export/import, rewind, follow-ups, state, abort, steer, compact, approvals, rm)",
	}
	bindURL(cmd.PersistentFlags(), &sc.base, &sc.agent)
	cmd.PersistentPreRun = func(*cobra.Command, []string) { sc.base = agentBase(sc.base, sc.agent) }
	approvals := &approvalClient{base: &sc.base, call: sc.call}
	list := &cobra.Command{
		Use:   "list",
		Short: "List your sessions (every session with an admin token), most recently active first; filters search Temporal visibility",
		Long: "List your sessions (every session with an admin token), most recently active first.\n\n" +
			"With --agent, only that agent's sessions (a deployment serving several).\n" +
			"With --channel, --status, --principal or --parent the list comes from Temporal visibility,\n" +
			"by the sessions' search attributes (FastAgentAgent, FastAgentChannel, FastAgentStatus,\n" +
			"FastAgentPrincipal, FastAgentParent), newest first; it lags a moment behind the sessions.\n" +
			"Example: fastagent session list --channel slack --status waiting_approval",
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error { return sc.list() },
	}
	list.Flags().IntVar(&sc.limit, "limit", 0, "sessions per page (default 50)")
	list.Flags().StringVar(&sc.cursor, "cursor", "", "continue a listing (the cursor the last page printed)")
	list.Flags().StringVar(&sc.filter.channel, "channel", "", "only sessions created by this channel: http, schedule, slack, feishu, telegram, github, hook:<name>, …")
	list.Flags().StringVar(&sc.filter.status, "status", "", "only sessions in this status: waiting_approval, waiting_answer (waiting for a person) or idle")
	list.Flags().StringVar(&sc.filter.principal, "principal", "", "only sessions this API principal created")
	list.Flags().StringVar(&sc.filter.parent, "parent", "", "only sessions started by this session")
	transcript := sessionCommand("transcript <session>", "Print the session's current branch (--tree: every entry) as JSON", sc.transcript, 1)
	transcript.Flags().BoolVar(&sc.tree, "tree", false, "every entry of the session, not only the current branch")
	export := sessionCommand("export <session>", "Write the session as a pi JSONL session file (stdout, or -o file)", sc.export, 1)
	export.Flags().StringVarP(&sc.out, "output", "o", "", "write to this file instead of stdout")
	imp := sessionCommand("import <file>", "Create a durable session from a pi JSONL session file (--as names it; default: the file's session id)", sc.importFile, 1)
	imp.Flags().StringVar(&sc.as, "as", "", "the new session's ID (default: the file's session id)")
	rm := sessionCommand("rm <session>", "Delete a session for good: end its workflow and its sub-agents', remove its transcript and records", sc.rm, 1)
	rm.Long = "Delete a session for good: its workflow and its running sub-agents are ended, and its transcript,\n" +
		"turn records and sub-agent sessions are removed from the store. A session running or queueing a turn\n" +
		"is refused unless --force, which ends that turn with the session. The server logs every deletion."
	rm.Flags().BoolVar(&sc.force, "force", false, "delete the session even while it runs or queues a turn (the turn ends with it)")
	cmd.AddCommand(
		rm,
		sessionCommand("show <session>", "Print the session's state as JSON", sc.show, 1),
		sessionCommand("wakes <session>", "List the session's pending wake-ups and the last ones that fired", sc.wakes, 1),
		sessionCommand("abort <session>", "Stop the session's running turn", sc.abort, 1),
		sessionCommand("steer <session> <text>", "Send a message the running turn reads after its current step", sc.steer, 2),
		sessionCommand("compact <session>", "Compact the session's context now: summarize its older part, keep the newest messages", sc.compact, 1),
		sc.resendCommand(),
		sessionCommand("deny <session> <call>", "Deny a tool call waiting for approval", sc.deny, 2),
		sessionCommand("answer <session> <call> <text>", "Answer a question the agent asked (ask_user); the text becomes the call's result", sc.answer, 3),
		transcript,
		sessionCommand("rewind <session> <entry>", "Move the session's leaf back to an entry; the abandoned branch is summarized for the model", sc.rewind, 2),
		sessionCommand("followup <session> <text>", "Queue a message that runs as a turn after the current one; prints the turn key", sc.followup, 2),
		export,
		imp,
		list,
		newSessionApprovals(approvals),
		newSessionApprove(approvals),
	)
	return cmd
}

// sessionCommand is a subcommand taking exactly nargs arguments, the first
// of which (a session ID or a file) run gets on its own.
func sessionCommand(use, short string, run func(id string, args []string) error, nargs int) *cobra.Command {
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

func (sc *sessionCmds) call(method, u, body string) ([]byte, error) {
	return call(sc.g.apiToken(), method, u, body)
}

func (sc *sessionCmds) path(id, rest string) string {
	return strings.TrimRight(sc.base, "/") + "/sessions/" + url.PathEscape(id) + rest
}

// callJSON calls the API and decodes its JSON answer into v.
func (sc *sessionCmds) callJSON(method, u, body string, v any) error {
	b, err := sc.call(method, u, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return failure("unexpected answer: %w", err)
	}
	return nil
}

func (sc *sessionCmds) list() error {
	q := url.Values{}
	if sc.limit > 0 {
		q.Set("limit", fmt.Sprint(sc.limit))
	}
	if sc.cursor != "" {
		q.Set("cursor", sc.cursor)
	}
	filtered := false
	for k, val := range map[string]string{"channel": sc.filter.channel, "status": sc.filter.status,
		"principal": sc.filter.principal, "parent": sc.filter.parent} {
		if val != "" {
			q.Set(k, val)
			filtered = true
		}
	}
	if filtered {
		if sc.agent != "" {
			q.Set("agent", sc.agent)
		}
		return sc.search(q)
	}
	var v struct {
		Sessions []struct {
			Session, Owner, Status string
			Turns, Entries         int
			Updated                time.Time
		} `json:"sessions"`
		NextCursor string `json:"nextCursor"`
	}
	if err := sc.callJSON(http.MethodGet, strings.TrimRight(sc.base, "/")+"/sessions?"+q.Encode(), "", &v); err != nil {
		return err
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
}

// search prints the sessions matching the search filters in q.
func (sc *sessionCmds) search(q url.Values) error {
	var v struct {
		Sessions []struct {
			Session, Agent, Principal, Channel, Status, Workflow string
			Started                                              time.Time
		} `json:"sessions"`
		NextCursor string `json:"nextCursor"`
	}
	if err := sc.callJSON(http.MethodGet, strings.TrimRight(sc.base, "/")+"/sessions?"+q.Encode(), "", &v); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tAGENT\tCHANNEL\tPRINCIPAL\tSTATUS\tWORKFLOW\tSTARTED")
	for _, si := range v.Sessions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", si.Session, si.Agent, si.Channel, si.Principal, si.Status, si.Workflow,
			si.Started.Local().Format(time.RFC3339))
	}
	tw.Flush()
	if v.NextCursor != "" {
		fmt.Printf("\nmore: add --cursor %s\n", v.NextCursor)
	}
	return nil
}

func (sc *sessionCmds) show(id string, _ []string) error {
	body, err := sc.call(http.MethodGet, sc.path(id, ""), "")
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(body, '\n'))
	return err
}

func (sc *sessionCmds) wakes(id string, _ []string) error {
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
	if err := sc.callJSON(http.MethodGet, sc.path(id, ""), "", &v); err != nil {
		return err
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
}

func (sc *sessionCmds) abort(id string, _ []string) error {
	body, err := sc.call(http.MethodPost, sc.path(id, "/abort"), `{"reason":"aborted from the command line"}`)
	if err == nil {
		fmt.Println(string(body))
	}
	return err
}

func (sc *sessionCmds) rm(id string, _ []string) error {
	u := sc.path(id, "")
	if sc.force {
		u += "?force=true"
	}
	var v struct {
		Workflows   []string `json:"workflows"`
		Entries     int64    `json:"entries"`
		SubSessions []string `json:"subSessions"`
		Running     string   `json:"running"`
	}
	if err := sc.callJSON(http.MethodDelete, u, "", &v); err != nil {
		return err
	}
	fmt.Printf("deleted session %s: %d entries, %d sub-agent session(s), %d workflow(s) ended", id, v.Entries, len(v.SubSessions), len(v.Workflows))
	if v.Running != "" {
		fmt.Printf(", running turn %s ended", v.Running)
	}
	fmt.Println()
	return nil
}

func (sc *sessionCmds) steer(id string, args []string) error {
	b, _ := json.Marshal(map[string]string{"text": args[0]})
	_, err := sc.call(http.MethodPost, sc.path(id, "/steer"), string(b))
	return err
}

// resendCommand is session resend: a channel reply that failed after its
// retries (the state's failedReplies) is sent once more.
func (sc *sessionCmds) resendCommand() *cobra.Command {
	cmd := sessionCommand("resend <session> <turn>", "Send a channel reply that failed after its retries (the state's failedReplies) once more", nil, 2)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if _, err := sc.call(http.MethodPost, sc.path(args[0], "/turns/"+url.PathEscape(args[1])+"/resend"), `{}`); err != nil {
			return err
		}
		_, err := fmt.Fprintf(c.OutOrStdout(), "sent the reply of turn %s again\n", args[1])
		return err
	}
	return cmd
}

func (sc *sessionCmds) compact(id string, _ []string) error {
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
	if err := sc.callJSON(http.MethodPost, sc.path(id, "/compact"), `{}`, &v); err != nil {
		return err
	}
	r := v.Result
	if !v.Compacted {
		fmt.Printf("nothing compacted: %s\n", r.Skipped)
		return nil
	}
	fmt.Printf("compacted: %d messages summarized, ~%d → ~%d tokens; entry %s keeps from %s\n",
		r.Summarized, r.TokensBefore, r.TokensAfter, r.EntryID, r.FirstKept)
	return nil
}

func (sc *sessionCmds) deny(id string, args []string) error {
	_, err := sc.call(http.MethodPost, sc.path(id, "/approvals/"+url.PathEscape(args[0])), `{"approve":false,"reason":"denied from the command line"}`)
	return err
}

func (sc *sessionCmds) answer(id string, args []string) error {
	b, _ := json.Marshal(map[string]string{"text": args[1]})
	_, err := sc.call(http.MethodPost, sc.path(id, "/answers/"+url.PathEscape(args[0])), string(b))
	if err == nil {
		fmt.Printf("answered %s\n", args[0])
	}
	return err
}

func (sc *sessionCmds) transcript(id string, _ []string) error {
	rest := "/transcript"
	if sc.tree {
		rest += "?tree=1"
	}
	body, err := sc.call(http.MethodGet, sc.path(id, rest), "")
	if err == nil {
		_, err = os.Stdout.Write(append(body, '\n'))
	}
	return err
}

func (sc *sessionCmds) rewind(id string, args []string) error {
	b, _ := json.Marshal(map[string]string{"entry": args[0]})
	var v struct {
		Leaf, SummaryEntry string
		Abandoned          int
	}
	if err := sc.callJSON(http.MethodPost, sc.path(id, "/rewind"), string(b), &v); err != nil {
		return err
	}
	fmt.Printf("rewound to %s: %d messages abandoned; leaf %s\n", args[0], v.Abandoned, v.Leaf)
	return nil
}

func (sc *sessionCmds) followup(id string, args []string) error {
	b, _ := json.Marshal(map[string]string{"text": args[0]})
	var v struct{ Turn, Events string }
	if err := sc.callJSON(http.MethodPost, sc.path(id, "/followup"), string(b), &v); err != nil {
		return err
	}
	fmt.Printf("queued turn %s (follow it: GET %s)\n", v.Turn, v.Events)
	return nil
}

func (sc *sessionCmds) export(id string, _ []string) error {
	body, err := sc.call(http.MethodGet, sc.path(id, "/export"), "")
	if err != nil {
		return err
	}
	if sc.out == "" || sc.out == "-" {
		_, err = os.Stdout.Write(body)
		return err
	}
	if err := os.WriteFile(sc.out, body, 0o600); err != nil {
		return failure("write %s: %w", sc.out, err)
	}
	fmt.Fprintf(os.Stderr, "exported %s to %s\n", id, sc.out)
	return nil
}

func (sc *sessionCmds) importFile(file string, _ []string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return usageError("read %s: %w", file, err)
	}
	b, _ := json.Marshal(map[string]string{"session": sc.as, "jsonl": string(data)})
	var v struct {
		Session, Leaf string
		Entries       int
	}
	if err := sc.callJSON(http.MethodPost, strings.TrimRight(sc.base, "/")+"/sessions/import", string(b), &v); err != nil {
		return err
	}
	fmt.Printf("imported session %s: %d entries, leaf %s\n", v.Session, v.Entries, v.Leaf)
	return nil
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
