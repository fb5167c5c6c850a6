package schedules

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/workflows"
)

// ErrNoSchedule is returned for a schedule name Temporal does not know.
var ErrNoSchedule = errors.New("no such schedule")

// Sync states of Info.Sync: how the Temporal Schedule compares with its file.
const (
	SyncInSync     = "in sync"
	SyncChanged    = "file changed; restart fastagent to apply"
	SyncNotCreated = "not created yet; start fastagent to create it"
	SyncNoFile     = "file removed; deleted at the next start"
	SyncDisabled   = "file disabled; deleted at the next start"
	SyncForeign    = "owned by another agent dir"
)

// Info describes one schedule as Temporal has it (and, when listed with
// files, how it compares with its file).
type Info struct {
	Name   string `json:"name"`
	ID     string `json:"id"`
	Cron   string `json:"cron"`
	TZ     string `json:"tz"`
	Prompt string `json:"prompt,omitempty"`
	// Owner is the agent dir that created it.
	Owner string `json:"owner,omitempty"`
	// Exists is false for a file whose schedule is not created yet.
	Exists  bool        `json:"exists"`
	Paused  bool        `json:"paused"`
	Note    string      `json:"note,omitempty"`
	Running []Execution `json:"running,omitempty"`
	// Next are the next fire times Temporal computed.
	Next []time.Time `json:"next,omitempty"`
	// Recent are the latest fires Temporal started (oldest first).
	Recent         []Action  `json:"recent,omitempty"`
	Actions        int       `json:"actions"`
	MissedCatchup  int       `json:"missedCatchupWindow,omitempty"`
	SkippedOverlap int       `json:"skippedOverlap,omitempty"`
	TaskQueue      string    `json:"taskQueue,omitempty"`
	CreatedAt      time.Time `json:"createdAt,omitzero"`
	UpdatedAt      time.Time `json:"updatedAt,omitzero"`
	// File and Sync compare the schedule with the workspace (List only).
	File string `json:"file,omitempty"`
	Sync string `json:"sync,omitempty"`
	// digest of the action, compared with the file's.
	digest string
}

// Execution names one fire workflow run.
type Execution struct {
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
}

// Action is one fire Temporal started.
type Action struct {
	Execution
	ScheduledFor time.Time `json:"scheduledFor"`
	StartedAt    time.Time `json:"startedAt"`
}

// Describe returns what Temporal knows of the schedule named name.
func Describe(ctx context.Context, c client.Client, name string) (Info, error) {
	id := workflows.ScheduleID(name)
	desc, err := c.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
	if isNotFound(err) {
		return Info{}, fmt.Errorf("%w: %s (is there a schedules/%s.yaml, and did fastagent start since it was added?)", ErrNoSchedule, id, name)
	}
	if err != nil {
		return Info{}, fmt.Errorf("schedules: describe %s: %w", id, err)
	}
	return infoOf(name, desc), nil
}

func infoOf(name string, d *client.ScheduleDescription) Info {
	in := Info{
		Name:           name,
		ID:             workflows.ScheduleID(name),
		Owner:          Owner(d.Memo),
		Exists:         true,
		Next:           d.Info.NextActionTimes,
		Actions:        d.Info.NumActions,
		MissedCatchup:  d.Info.NumActionsMissedCatchupWindow,
		SkippedOverlap: d.Info.NumActionsSkippedOverlap,
		CreatedAt:      d.Info.CreatedAt,
		UpdatedAt:      d.Info.LastUpdateAt,
	}
	if st := d.Schedule.State; st != nil {
		in.Paused, in.Note = st.Paused, st.Note
	}
	if sp := d.Schedule.Spec; sp != nil {
		in.TZ = sp.TimeZoneName
	}
	if wa, ok := d.Schedule.Action.(*client.ScheduleWorkflowAction); ok {
		in.TaskQueue = wa.TaskQueue
		in.digest = memoString(wa.Memo[MemoDigest])
		if len(wa.Args) > 0 {
			var fi workflows.FireInput
			if p, ok := wa.Args[0].(*commonpb.Payload); ok && payloads().FromPayload(p, &fi) == nil {
				in.Cron, in.Prompt = fi.Cron, fi.Prompt
				if fi.TZ != "" {
					in.TZ = fi.TZ
				}
			}
		}
	}
	for _, r := range d.Info.RunningWorkflows {
		in.Running = append(in.Running, Execution{WorkflowID: r.WorkflowID, RunID: r.FirstExecutionRunID})
	}
	for _, a := range d.Info.RecentActions {
		if a.StartWorkflowResult == nil {
			continue
		}
		in.Recent = append(in.Recent, Action{
			Execution:    Execution{WorkflowID: a.StartWorkflowResult.WorkflowID, RunID: a.StartWorkflowResult.FirstExecutionRunID},
			ScheduledFor: a.ScheduleTime,
			StartedAt:    a.ActualTime,
		})
	}
	return in
}

// ListOptions select the schedules List returns.
type ListOptions struct {
	// AgentDir compares the workspace's files with Temporal's schedules.
	AgentDir string
	// TaskQueue is the one the files would be reconciled with (for Sync).
	TaskQueue string
	// All lists every fastagent schedule of the namespace, whatever owns it.
	All bool
}

// List returns the schedules of the workspace — those its files define and
// those it owns in Temporal — sorted by name, each described by Temporal and
// compared with its file.
func List(ctx context.Context, c client.Client, opts ListOptions) ([]Info, error) {
	owner := ""
	if opts.AgentDir != "" {
		abs, err := filepath.Abs(opts.AgentDir)
		if err != nil {
			return nil, fmt.Errorf("schedules: %w", err)
		}
		owner = abs
	}
	if opts.TaskQueue == "" {
		opts.TaskQueue = workflows.TaskQueue
	}
	var files Files
	if owner != "" {
		var err error
		if files, err = LoadDir(owner); err != nil {
			return nil, err
		}
	}
	specs := map[string]Spec{}
	names := map[string]bool{}
	for _, s := range files.Specs {
		specs[s.Name] = s
		names[s.Name] = true
	}
	disabled := map[string]bool{}
	for _, n := range files.Disabled {
		disabled[n] = true
		names[n] = true
	}
	entries, err := listFastagent(ctx, c.ScheduleClient())
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if opts.All || (owner != "" && Owner(e.Memo) == owner) {
			names[strings.TrimPrefix(e.ID, workflows.ScheduleIDPrefix)] = true
		}
	}
	var out []Info
	for _, name := range sortedKeys(names) {
		in, err := Describe(ctx, c, name)
		if errors.Is(err, ErrNoSchedule) {
			s, ok := specs[name]
			if !ok {
				continue // a disabled file whose schedule is gone
			}
			in = Info{Name: name, ID: workflows.ScheduleID(name), Cron: s.Cron, TZ: s.TZ, Prompt: s.Prompt}
		} else if err != nil {
			return nil, err
		}
		if s, ok := specs[name]; ok {
			in.File = s.File
		}
		in.Sync = syncState(in, specs, disabled, owner, opts.TaskQueue)
		out = append(out, in)
	}
	return out, nil
}

func syncState(in Info, specs map[string]Spec, disabled map[string]bool, owner, taskQueue string) string {
	if owner == "" {
		return ""
	}
	s, hasFile := specs[in.Name]
	switch {
	case !in.Exists:
		return SyncNotCreated
	case in.Owner != owner:
		return SyncForeign
	case disabled[in.Name] && !hasFile:
		return SyncDisabled
	case !hasFile:
		return SyncNoFile
	case in.digest != Digest(s, taskQueue):
		return SyncChanged
	}
	return SyncInSync
}

// Fire is one fire of a schedule as Temporal records it: the fire
// workflow's execution and, once it completed, its FireRecord.
type Fire struct {
	Execution
	// Status is the workflow's status: running, completed, failed,
	// terminated, canceled or timed out.
	Status    string    `json:"status"`
	StartedAt time.Time `json:"startedAt"`
	ClosedAt  time.Time `json:"closedAt,omitzero"`
	// Record is the fire's result (nil while it runs).
	Record *workflows.FireRecord `json:"record,omitempty"`
}

// History returns up to limit fires of the schedule named name, newest
// first, from Temporal's visibility (fire workflows carry the schedule's ID
// in TemporalScheduledById) joined with the schedule's recent actions (which
// visibility may not show yet). A fire that did not complete gets a record
// with outcome "failed".
func History(ctx context.Context, c client.Client, name string, limit int) ([]Fire, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("%w: %q is not a schedule name", ErrNoSchedule, name)
	}
	if limit <= 0 {
		limit = 20
	}
	id := workflows.ScheduleID(name)
	seen := map[string]bool{}
	var fires []Fire
	query := fmt.Sprintf("%s = '%s' AND WorkflowType = '%s'", workflows.ScheduledByIDAttribute, id, workflows.ScheduleFireWorkflowType)
	var token []byte
	for len(fires) < limit {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query:         query,
			PageSize:      int32(limit),
			NextPageToken: token,
		})
		if err != nil {
			return nil, fmt.Errorf("schedules: list fires of %s: %w", id, err)
		}
		for _, ex := range resp.Executions {
			fires = append(fires, fireOf(ex))
			seen[ex.GetExecution().GetRunId()] = true
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	// Fires started a moment ago may not be in visibility yet.
	if desc, err := c.ScheduleClient().GetHandle(ctx, id).Describe(ctx); err == nil {
		for _, a := range desc.Info.RecentActions {
			r := a.StartWorkflowResult
			if r == nil || seen[r.FirstExecutionRunID] {
				continue
			}
			d, err := c.DescribeWorkflow(ctx, r.WorkflowID, r.FirstExecutionRunID)
			if err != nil {
				continue
			}
			fires = append(fires, fireOf(d.RawResponse.GetWorkflowExecutionInfo()))
		}
	} else if !isNotFound(err) {
		return nil, fmt.Errorf("schedules: describe %s: %w", id, err)
	}
	sort.SliceStable(fires, func(i, j int) bool { return fires[i].StartedAt.After(fires[j].StartedAt) })
	if len(fires) > limit {
		fires = fires[:limit]
	}
	for i := range fires {
		fires[i].Record = record(ctx, c, name, fires[i])
	}
	return fires, nil
}

func fireOf(ex *workflowpb.WorkflowExecutionInfo) Fire {
	f := Fire{
		Execution: Execution{WorkflowID: ex.GetExecution().GetWorkflowId(), RunID: ex.GetExecution().GetRunId()},
		Status:    statusName(ex.GetStatus()),
		StartedAt: ex.GetStartTime().AsTime(),
	}
	if ex.GetCloseTime() != nil {
		f.ClosedAt = ex.GetCloseTime().AsTime()
	}
	return f
}

// record reads a closed fire's result; a fire that did not complete gets a
// failed record saying how it ended.
func record(ctx context.Context, c client.Client, name string, f Fire) *workflows.FireRecord {
	switch f.Status {
	case "running":
		return nil
	case "completed":
		var rec workflows.FireRecord
		if err := c.GetWorkflow(ctx, f.WorkflowID, f.RunID).Get(ctx, &rec); err == nil {
			return &rec
		}
	}
	return &workflows.FireRecord{
		Name:    name,
		Session: workflows.ScheduleSession(name),
		FiredAt: f.StartedAt,
		Ms:      max(f.ClosedAt.Sub(f.StartedAt).Milliseconds(), 0),
		Outcome: workflows.FireFailed,
		Error:   "the fire workflow ended " + f.Status,
	}
}

func statusName(s enumspb.WorkflowExecutionStatus) string {
	switch s {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return "running"
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "completed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return "failed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "canceled"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "terminated"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "timed out"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return "continued as new"
	}
	return strings.ToLower(s.String())
}

// Trigger fires the schedule named name now, as `temporal schedule trigger`
// does (the schedule's state, paused or not, is unchanged), and returns the
// fire workflow Temporal started. It waits up to startWait (default 30s)
// for the start to show in the schedule's recent actions.
func Trigger(ctx context.Context, c client.Client, name string, startWait time.Duration) (Execution, error) {
	if startWait <= 0 {
		startWait = 30 * time.Second
	}
	before, err := Describe(ctx, c, name)
	if err != nil {
		return Execution{}, err
	}
	known := map[string]bool{}
	for _, a := range before.Recent {
		known[a.RunID] = true
	}
	for _, r := range before.Running {
		known[r.RunID] = true
	}
	h := c.ScheduleClient().GetHandle(ctx, before.ID)
	if err := h.Trigger(ctx, client.ScheduleTriggerOptions{Overlap: TriggerOverlap}); err != nil {
		return Execution{}, fmt.Errorf("schedules: trigger %s: %w", before.ID, err)
	}
	wctx, cancel := context.WithTimeout(ctx, startWait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return Execution{}, ctx.Err()
			}
			return Execution{}, fmt.Errorf("schedules: %s was triggered but no fire started within %s; see `temporal schedule describe --schedule-id %s`", before.ID, startWait, before.ID)
		case <-tick.C:
		}
		now, err := Describe(wctx, c, name)
		if err != nil {
			continue
		}
		for i := len(now.Recent) - 1; i >= 0; i-- {
			if a := now.Recent[i]; !known[a.RunID] {
				return a.Execution, nil
			}
		}
	}
}

// Wait waits for a fire to end and returns its record.
func Wait(ctx context.Context, c client.Client, ex Execution) (workflows.FireRecord, error) {
	var rec workflows.FireRecord
	if err := c.GetWorkflow(ctx, ex.WorkflowID, ex.RunID).Get(ctx, &rec); err != nil {
		return rec, fmt.Errorf("schedules: fire %s: %w", ex.WorkflowID, err)
	}
	return rec, nil
}
