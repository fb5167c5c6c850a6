package schedules

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"

	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/workflows"
)

// Memo keys. The schedule's own memo (set once, at creation) names its owner;
// the action's memo (replaced by every update, copied to each fire) carries
// the digest of the file it was built from.
const (
	// MemoOwner holds the absolute agent dir that owns a schedule. Reconcile
	// updates and deletes only schedules whose owner is its agent dir.
	MemoOwner = "fastagent"
	// MemoDigest holds a digest of the desired schedule (file + task queue).
	MemoDigest = "fastagentDigest"
	// MemoName holds the schedule's name.
	MemoName = "fastagentSchedule"
)

// Policies every schedule gets.
const (
	// Overlap skips an occurrence that comes while the previous fire still
	// runs: a fire is never run twice at once, and after downtime Temporal
	// starts one overdue occurrence, not every missed one (the others are
	// skipped while it runs).
	Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
	// CatchupWindow is how late an overdue occurrence may still start (after
	// Temporal or every worker was down). With Overlap, at most one does.
	CatchupWindow = 365 * 24 * time.Hour
	// TriggerOverlap is the overlap policy of a manual fire (`fastagent fire`):
	// it starts at once even while a scheduled fire runs; the session queues
	// its turn behind the running one.
	TriggerOverlap = enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL
)

// digestVersion changes when the shape of a schedule built from a file
// changes, so that Reconcile rewrites existing schedules.
const digestVersion = 1

// Options configure Reconcile.
type Options struct {
	// AgentDir holds schedules/; it is also the owner mark of the schedules.
	AgentDir string
	// TaskQueue is where fires run (default workflows.TaskQueue).
	TaskQueue string
	// Agent, for an agent served beside the main one, names its schedules
	// "<agent>/<file name>" (ID schedule:<agent>/<name>), whose turns run in
	// the agent's own sessions; "" for the main agent.
	Agent  string
	Logger *slog.Logger
}

// Report says what Reconcile did, by schedule name.
type Report struct {
	Created   []string
	Updated   []string
	Deleted   []string
	Unchanged []string
	// Warnings are files ignored and schedules left alone (owned elsewhere).
	Warnings []string
}

// Reconcile makes the Temporal Schedules of the workspace match its
// schedules/ files: it creates new ones, updates changed ones and deletes the
// ones whose file was removed or renamed *.disabled. A bad file fails it
// before anything changes, with an error naming the file.
func Reconcile(ctx context.Context, c client.Client, opts Options) (Report, error) {
	var rep Report
	owner, err := filepath.Abs(opts.AgentDir)
	if err != nil {
		return rep, fmt.Errorf("schedules: %w", err)
	}
	opts.AgentDir = owner
	if opts.TaskQueue == "" {
		opts.TaskQueue = workflows.TaskQueue
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger
	files, err := LoadDir(owner)
	if err != nil {
		return rep, err
	}
	files.ForAgent(opts.Agent)
	rep.Warnings = append(rep.Warnings, files.Ignored...)
	sc := c.ScheduleClient()
	want := map[string]bool{}
	for _, s := range files.Specs {
		want[s.Name] = true
		what, err := apply(ctx, sc, s, opts)
		if err != nil {
			return rep, err
		}
		switch what {
		case "created":
			rep.Created = append(rep.Created, s.Name)
		case "updated":
			rep.Updated = append(rep.Updated, s.Name)
		default:
			rep.Unchanged = append(rep.Unchanged, s.Name)
		}
	}
	// Disabled files name their schedule directly (visibility may lag); the
	// listing finds the schedules whose file is gone.
	doomed := map[string]bool{}
	for _, name := range files.Disabled {
		if !want[name] {
			doomed[name] = true
		}
	}
	var owned []string
	err = retry(ctx, log, "list schedules", func(ctx context.Context) (err error) {
		owned, err = listOwned(ctx, sc, owner)
		return err
	})
	if err != nil {
		return rep, err
	}
	for _, name := range owned {
		if !want[name] {
			doomed[name] = true
		}
	}
	for _, name := range sortedKeys(doomed) {
		deleted, warn, err := remove(ctx, sc, name, owner, log)
		if err != nil {
			return rep, err
		}
		if warn != "" {
			rep.Warnings = append(rep.Warnings, warn)
		}
		if deleted {
			rep.Deleted = append(rep.Deleted, name)
		}
	}
	if n := len(rep.Created) + len(rep.Updated) + len(rep.Deleted); n > 0 {
		log.Info("schedules reconciled", "created", rep.Created, "updated", rep.Updated, "deleted", rep.Deleted, "unchanged", len(rep.Unchanged))
	}
	return rep, nil
}

// apply creates or updates the schedule of s; it returns "created",
// "updated" or "unchanged".
func apply(ctx context.Context, sc client.ScheduleClient, s Spec, opts Options) (string, error) {
	id := workflows.ScheduleID(s.Name)
	digest := Digest(s, opts.TaskQueue)
	log := opts.Logger
	for try := 0; ; try++ {
		h := sc.GetHandle(ctx, id)
		var desc *client.ScheduleDescription
		err := retry(ctx, log, "describe "+id, func(ctx context.Context) (err error) {
			desc, err = h.Describe(ctx)
			return err
		})
		if isNotFound(err) {
			err = retry(ctx, log, "create "+id, func(ctx context.Context) error {
				_, err := sc.Create(ctx, client.ScheduleOptions{
					ID:            id,
					Spec:          scheduleSpec(s),
					Action:        action(s, opts.TaskQueue, digest),
					Overlap:       Overlap,
					CatchupWindow: CatchupWindow,
					Memo:          map[string]any{MemoOwner: opts.AgentDir},
				})
				return err
			})
			if errors.Is(err, temporal.ErrScheduleAlreadyRunning) && try == 0 {
				continue // another process created it just now: compare with theirs
			}
			if err != nil {
				return "", fmt.Errorf("schedules: %s: create schedule %s: %w", s.File, id, err)
			}
			return "created", nil
		}
		if err != nil {
			return "", fmt.Errorf("schedules: %s: describe schedule %s: %w", s.File, id, err)
		}
		if o := Owner(desc.Memo); o != opts.AgentDir {
			return "", fmt.Errorf("schedules: %s: schedule %s already exists and belongs to %s; rename the file, or delete that schedule with `temporal schedule delete --schedule-id %s`", s.File, id, ownerName(o), id)
		}
		if ActionDigest(desc.Schedule.Action) == digest {
			return "unchanged", nil
		}
		err = retry(ctx, log, "update "+id, func(ctx context.Context) error {
			return h.Update(ctx, client.ScheduleUpdateOptions{
				DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
					spec := scheduleSpec(s)
					return &client.ScheduleUpdate{Schedule: &client.Schedule{
						Action: action(s, opts.TaskQueue, digest),
						Spec:   &spec,
						Policy: &client.SchedulePolicies{Overlap: Overlap, CatchupWindow: CatchupWindow},
						// Keep the state: a schedule paused from the Temporal
						// UI or CLI stays paused.
						State: in.Description.Schedule.State,
					}}, nil
				},
			})
		})
		if err != nil {
			return "", fmt.Errorf("schedules: %s: update schedule %s: %w", s.File, id, err)
		}
		return "updated", nil
	}
}

// remove deletes the schedule named name if owner owns it.
func remove(ctx context.Context, sc client.ScheduleClient, name, owner string, log *slog.Logger) (bool, string, error) {
	id := workflows.ScheduleID(name)
	h := sc.GetHandle(ctx, id)
	var desc *client.ScheduleDescription
	err := retry(ctx, log, "describe "+id, func(ctx context.Context) (err error) {
		desc, err = h.Describe(ctx)
		return err
	})
	if isNotFound(err) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("schedules: describe schedule %s: %w", id, err)
	}
	if o := Owner(desc.Memo); o != owner {
		return false, fmt.Sprintf("schedule %s belongs to %s; left alone", id, ownerName(o)), nil
	}
	if err := retry(ctx, log, "delete "+id, h.Delete); err != nil && !isNotFound(err) {
		return false, "", fmt.Errorf("schedules: delete schedule %s: %w", id, err)
	}
	return true, "", nil
}

// listOwned returns the names of the schedules owner owns, as visibility
// lists them.
func listOwned(ctx context.Context, sc client.ScheduleClient, owner string) ([]string, error) {
	entries, err := listFastagent(ctx, sc)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if Owner(e.Memo) == owner {
			names = append(names, strings.TrimPrefix(e.ID, workflows.ScheduleIDPrefix))
		}
	}
	return names, nil
}

// listFastagent lists the schedules with the fastagent ID prefix.
func listFastagent(ctx context.Context, sc client.ScheduleClient) ([]*client.ScheduleListEntry, error) {
	it, err := sc.List(ctx, client.ScheduleListOptions{PageSize: 500})
	if err != nil {
		return nil, fmt.Errorf("schedules: list schedules: %w", err)
	}
	var out []*client.ScheduleListEntry
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("schedules: list schedules: %w", err)
		}
		if strings.HasPrefix(e.ID, workflows.ScheduleIDPrefix) {
			out = append(out, e)
		}
	}
	return out, nil
}

func scheduleSpec(s Spec) client.ScheduleSpec {
	return client.ScheduleSpec{CronExpressions: []string{s.Cron}, TimeZoneName: s.TZ}
}

func action(s Spec, taskQueue, digest string) *client.ScheduleWorkflowAction {
	return &client.ScheduleWorkflowAction{
		ID:        workflows.FireWorkflowID(s.Name),
		Workflow:  workflows.ScheduleFireWorkflowType,
		Args:      []any{workflows.FireInput{Name: s.Name, Prompt: s.Prompt, Cron: s.Cron, TZ: s.TZ, Deliver: []string(s.Deliver)}},
		TaskQueue: taskQueue,
		Memo:      map[string]any{MemoDigest: digest, MemoName: s.Name},
		StaticSummary: fmt.Sprintf("schedule %s (%s %s) → session %s",
			s.Name, s.Cron, s.TZ, workflows.ScheduleSession(s.Name)),
	}
}

// Digest identifies the schedule built from s for taskQueue: equal digests
// mean nothing to update.
func Digest(s Spec, taskQueue string) string {
	parts := []any{digestVersion, s.Cron, s.TZ, s.Prompt, taskQueue, int32(Overlap), CatchupWindow.String()}
	if len(s.Deliver) > 0 {
		// Only then: the digests of schedules without deliver: stay as they were.
		parts = append(parts, []string(s.Deliver))
	}
	b, _ := json.Marshal(parts)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ActionDigest returns the digest stored in a described schedule's action.
func ActionDigest(a client.ScheduleAction) string {
	wa, ok := a.(*client.ScheduleWorkflowAction)
	if !ok {
		return ""
	}
	return memoString(wa.Memo[MemoDigest])
}

// Owner returns the agent dir a schedule's memo names ("" if none).
func Owner(m *commonpb.Memo) string {
	return memoString(m.GetFields()[MemoOwner])
}

func memoString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case *commonpb.Payload:
		var s string
		if err := payloads().FromPayload(v, &s); err == nil {
			return s
		}
	}
	return ""
}

// payloads decodes the raw payloads a schedule description carries (memo,
// action arguments): the SDK hands them over still encoded, encrypted when
// the process has codec keys (the same environment tclient.Dial reads).
func payloads() converter.DataConverter {
	if c, err := codec.FromEnv(os.Getenv); err == nil && c != nil {
		return c.DataConverter()
	}
	return converter.GetDefaultDataConverter()
}

func ownerName(o string) string {
	if o == "" {
		return "no fastagent workspace (it was made by hand)"
	}
	return "the agent dir " + o
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// retry runs f until it succeeds, fails for good, or ctx ends. Temporal
// answers some calls only once its internal workers run (an embedded server
// takes a while after a restart), so a transient failure waits and retries,
// each attempt bounded by attemptTimeout.
func retry(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) error {
	delay := 250 * time.Millisecond
	warned := false
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := f(actx)
		cancel()
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		if !warned {
			log.Warn("Temporal is not serving schedules yet (an embedded server can take up to a minute after a quick restart); retrying", "op", what, "error", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// attemptTimeout bounds one call in retry.
const attemptTimeout = 15 * time.Second

// transient reports whether err may go away by itself.
func transient(err error) bool {
	switch serviceerror.ToStatus(err).Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}
