package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/workspace"
	"github.com/fastagent/fastagent/workflows"
)

// temporalFlags are the connection flags of the commands that only talk to
// Temporal (schedule, fire).
type temporalFlags struct {
	temporal  tclient.Config
	taskQueue string
}

func (f *temporalFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.temporal.Address, "temporal-address", envOr("TEMPORAL_ADDRESS", "127.0.0.1:7233"), "Temporal frontend host:port [TEMPORAL_ADDRESS]")
	fl.StringVar(&f.temporal.Namespace, "namespace", envOr("TEMPORAL_NAMESPACE", "default"), "Temporal namespace [TEMPORAL_NAMESPACE]")
}

// dial connects with the TEMPORAL_* settings; without a credential, a
// loopback address gets the key of a `fastagent dev` in stateDir.
func (f *temporalFlags) dial(ctx context.Context, log *slog.Logger, stateDir string) (client.Client, error) {
	tc := f.temporal.FromEnv().WithDevToken(stateDir)
	tc.Logger = log
	c, err := tclient.Dial(ctx, tc)
	if err != nil {
		return nil, failure("%w", err)
	}
	return c, nil
}

// connect prepares what every command that talks to Temporal needs: the
// logger, a context Ctrl-C cancels, and a client. done releases them.
func (f *temporalFlags) connect(cmd *cobra.Command, g *globals) (context.Context, client.Client, func(), error) {
	log, err := g.logger()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	c, err := f.dial(ctx, log, g.stateDirOrDefault())
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return ctx, c, func() { c.Close(); stop() }, nil
}

// scheduleCommand is `fastagent schedule list|history`.
func scheduleCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "List schedules (schedules/<name>.yaml) and their fire history, as Temporal has them",
		Long: "Each schedules/<name>.yaml ({cron, tz, prompt}) is a Temporal Schedule with ID schedule:<name>,\n" +
			"created, updated or deleted when `fastagent dev`, `start` or `worker` starts. Each fire runs one turn\n" +
			"in session schedule:<name>. Fire one now with `fastagent fire <name>`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("schedule needs a subcommand: list or history <name> (see fastagent schedule --help)")
		},
	}
	cmd.AddCommand(scheduleListCommand(g), scheduleHistoryCommand(g))
	return cmd
}

func scheduleListCommand(g *globals) *cobra.Command {
	f := &temporalFlags{}
	var (
		jsonOut bool
		all     bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the workspace's schedules: cron, time zone, next fires, paused/running, last fire",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := schedules.ListOptions{TaskQueue: f.taskQueue, All: all}
			var err error
			if opts.AgentDir, err = agentDirOf(g); err != nil {
				return failure("%w", err)
			}
			ctx, c, done, err := f.connect(cmd, g)
			if err != nil {
				return err
			}
			defer done()
			infos, err := schedules.List(ctx, c, opts)
			if err != nil {
				return failure("%w", err)
			}
			if jsonOut {
				return printJSON(cmd.OutOrStdout(), infos)
			}
			printSchedules(cmd.OutOrStdout(), infos, opts.AgentDir)
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&f.taskQueue, "task-queue", envOr("FASTAGENT_TASK_QUEUE", workflows.TaskQueue), "task queue the workers use, to tell whether a schedule matches its file [FASTAGENT_TASK_QUEUE]")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the schedules as JSON")
	cmd.Flags().BoolVar(&all, "all", false, "list every fastagent schedule of the namespace, whichever workspace owns it")
	return cmd
}

func scheduleHistoryCommand(g *globals) *cobra.Command {
	f := &temporalFlags{}
	var (
		jsonOut bool
		limit   int
	)
	cmd := &cobra.Command{
		Use:   "history <name>",
		Short: "Show a schedule's fires, newest first: when, outcome, duration, reply or error",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("schedule history takes one argument, the schedule name (see fastagent schedule list)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit <= 0 {
				return usageError("--limit %d: want a positive number", limit)
			}
			ctx, c, done, err := f.connect(cmd, g)
			if err != nil {
				return err
			}
			defer done()
			name, err := scheduleArg(args[0])
			if err != nil {
				return err
			}
			fires, err := schedules.History(ctx, c, name, limit)
			if err != nil {
				return failure("%w", err)
			}
			if jsonOut {
				recs := make([]workflows.FireRecord, 0, len(fires))
				for _, fr := range fires {
					recs = append(recs, recordOf(name, fr))
				}
				return printJSON(cmd.OutOrStdout(), recs)
			}
			if len(fires) == 0 {
				if _, err := schedules.Describe(ctx, c, name); err != nil {
					return failure("%w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "schedule:%s has not fired yet (fire it now with `fastagent fire %s`)\n", name, name)
				return nil
			}
			printHistory(cmd.OutOrStdout(), fires, name)
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the fire records as a JSON array")
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "how many fires to show")
	return cmd
}

// fireOptions are the flags of `fastagent fire`.
type fireOptions struct {
	noWait  bool
	jsonOut bool
	timeout time.Duration
}

// fireCommand is `fastagent fire <name>`.
func fireCommand(g *globals) *cobra.Command {
	f := &temporalFlags{}
	o := &fireOptions{}
	cmd := &cobra.Command{
		Use:   "fire <name>",
		Short: "Fire a schedule now (its state is unchanged) and print the reply",
		Long: "Triggers the Temporal Schedule schedule:<name> now, as `temporal schedule trigger --schedule-id schedule:<name>`\n" +
			"does, without pausing, unpausing or moving it. The fire runs one turn in session schedule:<name> on a\n" +
			"running worker. By default the command waits for the fire's record and prints the reply (exit 1 if the\n" +
			"turn failed); --no-wait returns once the fire started.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("fire takes one argument, the schedule name (see fastagent schedule list)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFire(cmd, g, f, *o, args[0])
		},
	}
	f.bind(cmd)
	cmd.Flags().BoolVar(&o.noWait, "no-wait", false, "return once the fire started, without waiting for the reply")
	cmd.Flags().BoolVar(&o.jsonOut, "json", false, "print the fire record (or, with --no-wait, the fire workflow) as JSON")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "stop waiting after this long (0 = wait until the turn ends); the fire goes on")
	return cmd
}

// runFire triggers the schedule named by arg and, unless --no-wait, waits
// for the fire's record and prints it.
func runFire(cmd *cobra.Command, g *globals, f *temporalFlags, o fireOptions, arg string) error {
	ctx, c, done, err := f.connect(cmd, g)
	if err != nil {
		return err
	}
	defer done()
	name, err := scheduleArg(arg)
	if err != nil {
		return err
	}
	ex, err := schedules.Trigger(ctx, c, name, 0)
	if err != nil {
		return failure("%w", err)
	}
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if o.noWait {
		if o.jsonOut {
			return printJSON(out, ex)
		}
		fmt.Fprintf(out, "fired schedule:%s (workflow %s); follow it with `fastagent schedule history %s`\n", name, ex.WorkflowID, name)
		return nil
	}
	if !o.jsonOut {
		fmt.Fprintf(errw, "fired schedule:%s (workflow %s), waiting for the turn in session %s…\n", name, ex.WorkflowID, workflows.ScheduleSession(name))
	}
	rec, err := waitFire(ctx, c, ex, name, o.timeout)
	if err != nil {
		return err
	}
	return printFire(out, errw, name, rec, o.jsonOut)
}

// waitFire waits (at most timeout, when set) for the fire's record. A wait
// that stops early leaves the fire running.
func waitFire(ctx context.Context, c client.Client, ex schedules.Execution, name string, timeout time.Duration) (workflows.FireRecord, error) {
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	rec, err := schedules.Wait(wctx, c, ex)
	if err != nil {
		if errors.Is(wctx.Err(), context.DeadlineExceeded) || ctx.Err() != nil {
			return rec, failure("stopped waiting; the fire goes on (see `fastagent schedule history %s`)", name)
		}
		return rec, failure("%w", err)
	}
	return rec, nil
}

// printFire prints a fire's record (as JSON with jsonOut) and fails when
// its turn failed.
func printFire(out, errw io.Writer, name string, rec workflows.FireRecord, jsonOut bool) error {
	if jsonOut {
		if err := printJSON(out, rec); err != nil {
			return err
		}
	}
	switch rec.Outcome {
	case workflows.FireFailed:
		return failure("fire %s failed: %s", name, rec.Error)
	case workflows.FireSkipped:
		if !jsonOut {
			fmt.Fprintf(errw, "skipped: %s\n", rec.Error)
		}
		return nil
	}
	if !jsonOut {
		fmt.Fprintln(out, strings.TrimRight(rec.Reply, "\n"))
		if len(rec.Delivered) > 0 {
			fmt.Fprintf(errw, "delivered to %s\n", strings.Join(rec.Delivered, ", "))
		}
	}
	if rec.DeliveryError != "" {
		return failure("fire %s: the answer was not delivered: %s", name, rec.DeliveryError)
	}
	return nil
}

// agentDirOf resolves the agent dir as the workspace loader does (--agent-dir,
// else the config's agentDir, else the workspace) without loading tools.
func agentDirOf(g *globals) (string, error) {
	dir, err := filepath.Abs(g.dir)
	if err != nil {
		return "", err
	}
	sub := g.agentDir
	if sub == "" {
		cfg, err := workspace.LoadConfig(dir)
		if err != nil {
			return "", err
		}
		sub = cfg.AgentDir
	}
	if sub == "" {
		return dir, nil
	}
	if filepath.IsAbs(sub) {
		return filepath.Clean(sub), nil
	}
	return filepath.Join(dir, sub), nil
}

// scheduleArg accepts "daily", "schedule:daily" and "schedules/daily.yaml".
func scheduleArg(arg string) (string, error) {
	s := strings.TrimPrefix(arg, workflows.ScheduleIDPrefix)
	for _, ext := range []string{".yaml", ".yml"} {
		if b, ok := strings.CutSuffix(filepath.Base(s), ext); ok {
			s = b
			break
		}
	}
	if !schedules.ValidName(s) {
		return "", usageError("%q is not a schedule name: use the file name without .yaml (see fastagent schedule list)", arg)
	}
	return s, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printSchedules(w io.Writer, infos []schedules.Info, agentDir string) {
	if len(infos) == 0 {
		fmt.Fprintf(w, "no schedules (add %s/<name>.yaml with cron, tz and prompt)\n", filepath.Join(agentDir, schedules.Dir))
		return
	}
	for i, in := range infos {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  (%s)\n", in.Name, in.ID)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		loc := time.UTC
		if l, err := time.LoadLocation(in.TZ); err == nil {
			loc = l
		}
		fmt.Fprintf(tw, "  cron\t%s  (%s)\n", in.Cron, in.TZ)
		if in.Exists {
			var next []string
			for _, t := range in.Next[:min(3, len(in.Next))] {
				next = append(next, t.In(loc).Format("Mon 2006-01-02 15:04 MST"))
			}
			if len(next) == 0 {
				next = []string{"none"}
			}
			fmt.Fprintf(tw, "  next\t%s\n", strings.Join(next, ", "))
			state := "active"
			if in.Paused {
				state = "paused"
				if in.Note != "" {
					state += " (" + in.Note + ")"
				}
			}
			if len(in.Running) > 0 {
				state += ", running " + in.Running[0].WorkflowID
			} else {
				state += ", idle"
			}
			fmt.Fprintf(tw, "  state\t%s\n", state)
			last := plural(in.Actions, "fire")
			if n := len(in.Recent); n > 0 {
				last += ", last " + in.Recent[n-1].StartedAt.In(loc).Format("2006-01-02 15:04:05 MST")
			}
			if in.SkippedOverlap > 0 {
				last += fmt.Sprintf(", %d skipped (previous fire still running)", in.SkippedOverlap)
			}
			fmt.Fprintf(tw, "  fired\t%s\n", last)
		}
		if in.Sync != "" && in.Sync != schedules.SyncInSync {
			fmt.Fprintf(tw, "  note\t%s\n", in.Sync)
		}
		fmt.Fprintf(tw, "  prompt\t%s\n", firstLine(in.Prompt, 100))
		tw.Flush()
	}
}

func printHistory(w io.Writer, fires []schedules.Fire, name string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIRED AT\tOUTCOME\tTOOK\tREPLY / ERROR")
	for _, fr := range fires {
		rec := recordOf(name, fr)
		text := rec.Reply
		if rec.Outcome != workflows.FireCompleted {
			text = rec.Error
		} else if rec.DeliveryError != "" {
			text = "not delivered: " + rec.DeliveryError
		}
		took := "-"
		if rec.Outcome != "running" {
			took = (time.Duration(rec.Ms) * time.Millisecond).Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rec.FiredAt.Local().Format("2006-01-02 15:04:05"), rec.Outcome, took, firstLine(strings.TrimSpace(text), 80))
	}
	tw.Flush()
}

// recordOf is a fire's record; a fire still running gets outcome "running".
func recordOf(name string, fr schedules.Fire) workflows.FireRecord {
	if fr.Record != nil {
		return *fr.Record
	}
	return workflows.FireRecord{
		Name:    name,
		Session: workflows.ScheduleSession(name),
		FiredAt: fr.StartedAt,
		Outcome: "running",
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
