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

// memoryCmds holds the flags of `fastagent memory`: the agent's long-term
// memories over the HTTP API (GET /memories, DELETE /memories/{id}).
type memoryCmds struct {
	g                     *globals
	base, agent           string
	query, principal, out string
	limit                 int
}

// memoryPageMax is the most memories one GET /memories answers.
const memoryPageMax = 500

type memoryRow struct {
	ID      string    `json:"id"`
	Agent   string    `json:"agent"`
	Owner   string    `json:"owner,omitempty"`
	Text    string    `json:"text"`
	Tags    []string  `json:"tags,omitempty"`
	Session string    `json:"session,omitempty"`
	Created time.Time `json:"created"`
}

func newMemory(g *globals) *cobra.Command {
	mc := &memoryCmds{g: g}
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "See, export and delete the agent's long-term memories (yours and the shared ones; every principal's with an admin token)",
	}
	bindURL(cmd.PersistentFlags(), &mc.base, &mc.agent)
	cmd.PersistentPreRun = func(*cobra.Command, []string) { mc.base = agentBase(mc.base, mc.agent) }
	list := &cobra.Command{
		Use:   "list",
		Short: "List memories, newest first (--query: most relevant first)",
		Args:  cobra.NoArgs,
		RunE:  func(c *cobra.Command, _ []string) error { return mc.list(c.OutOrStdout()) },
	}
	list.Flags().StringVarP(&mc.query, "query", "q", "", "only memories matching these words, most relevant first")
	list.Flags().IntVar(&mc.limit, "limit", 50, fmt.Sprintf("at most this many (1..%d)", memoryPageMax))
	list.Flags().StringVar(&mc.principal, "principal", "", "only this principal's memories (\"shared\": the shared ones; another principal's needs an admin token)")
	export := &cobra.Command{
		Use:   "export",
		Short: fmt.Sprintf("Write the memories you can see as JSON lines (stdout, or -o file; at most %d)", memoryPageMax),
		Args:  cobra.NoArgs,
		RunE:  func(c *cobra.Command, _ []string) error { return mc.export(c.OutOrStdout(), c.ErrOrStderr()) },
	}
	export.Flags().StringVarP(&mc.out, "output", "o", "", "write to this file instead of stdout")
	export.Flags().StringVar(&mc.principal, "principal", "", "only this principal's memories (\"shared\": the shared ones)")
	rm := &cobra.Command{
		Use:   "rm <id>...",
		Short: "Delete memories by id (yours; shared ones and other principals' need an admin token)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError("usage: fastagent memory rm <id>... (ids from fastagent memory list)")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error { return mc.rm(c.OutOrStdout(), args) },
	}
	cmd.AddCommand(list, rm, export)
	return cmd
}

func (mc *memoryCmds) fetch(limit int) ([]memoryRow, error) {
	if limit < 1 || limit > memoryPageMax {
		return nil, usageError("--limit must be between 1 and %d", memoryPageMax)
	}
	q := url.Values{"limit": {fmt.Sprint(limit)}}
	if mc.query != "" {
		q.Set("q", mc.query)
	}
	if mc.principal != "" {
		q.Set("principal", mc.principal)
	}
	b, err := call(mc.g.apiToken(), http.MethodGet, strings.TrimRight(mc.base, "/")+"/memories?"+q.Encode(), "")
	if err != nil {
		return nil, err
	}
	var v struct {
		Memories []memoryRow `json:"memories"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, failure("unexpected answer: %w", err)
	}
	return v.Memories, nil
}

func (mc *memoryCmds) list(stdout io.Writer) error {
	ms, err := mc.fetch(mc.limit)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOWNER\tCREATED\tTAGS\tTEXT")
	for _, m := range ms {
		owner := m.Owner
		if owner == "" {
			owner = "(shared)"
		}
		text := strings.ReplaceAll(m.Text, "\n", " ")
		if r := []rune(text); len(r) > 80 {
			text = string(r[:79]) + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, owner, m.Created.Local().Format(time.RFC3339), strings.Join(m.Tags, ","), text)
	}
	return tw.Flush()
}

func (mc *memoryCmds) rm(stdout io.Writer, ids []string) error {
	for _, id := range ids {
		if _, err := call(mc.g.apiToken(), http.MethodDelete, strings.TrimRight(mc.base, "/")+"/memories/"+url.PathEscape(id), ""); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "forgot", id)
	}
	return nil
}

func (mc *memoryCmds) export(stdout, stderr io.Writer) error {
	ms, err := mc.fetch(memoryPageMax)
	if err != nil {
		return err
	}
	w := stdout
	if mc.out != "" {
		f, err := os.OpenFile(mc.out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return failure("%w", err)
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	for _, m := range ms {
		if err := enc.Encode(m); err != nil {
			return failure("write: %w", err)
		}
	}
	if len(ms) == memoryPageMax {
		fmt.Fprintf(stderr, "fastagent: the export stopped at %d memories; narrow it with --principal\n", memoryPageMax)
	}
	return nil
}
