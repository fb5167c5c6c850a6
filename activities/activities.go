package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tmc/langchaingo/llms"
	"go.temporal.io/sdk/activity"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/hooks"
	iacts "github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Group is a set of activities served together: by the workers of the
// session's task queue, or — model and tools — alone, on the task queue
// fastagent.yaml's activities: block places them on.
type Group string

// The groups (see the table in the package documentation).
const (
	// GroupModel calls models: Model.Generate, Session.Compact, Session.Rewind.
	GroupModel Group = "model"
	// GroupTools runs tool calls: Tool.Execute.
	GroupTools Group = "tools"
	// GroupSession keeps the session's books: Session.Open, Turn.Begin,
	// Turn.Record, Wake.Next, Feed.Publish, Feed.Stop.
	GroupSession Group = "session"
	// GroupChannels answers on chat platforms and routes chat messages:
	// Channel.Reply, Channel.Stream, Channel.Fetch, Chat.Route, Chat.Drop,
	// Chat.Stop.
	GroupChannels Group = "channels"
	// GroupSchedules fires schedules: Schedule.Fire.
	GroupSchedules Group = "schedules"
)

// Groups lists every group.
func Groups() []Group {
	out := make([]Group, len(iacts.Groups))
	for i, g := range iacts.Groups {
		out[i] = Group(g)
	}
	return out
}

// ParseGroup reads a group's name ("tools"), with an error naming the
// groups for any other.
func ParseGroup(name string) (Group, error) {
	g, err := iacts.ParseGroup(name)
	return Group(g), err
}

// Options say which agent the activities serve and where its sessions
// keep their state.
type Options struct {
	// Dir is the agent's workspace (default "."); AgentDir optionally
	// moves the agent surface into a subfolder; StateDir holds machine
	// state (default <Dir>/.fastagent).
	Dir, AgentDir, StateDir string
	// Store is the session store: a SQLite file or a postgres:// DSN
	// (default <StateDir>/sessions.db). Every worker of the agent must use
	// the same store.
	Store string
	// Feed is the live feed: "" (in process) or nats://host:4222 — what
	// the agent's other workers and ingresses use.
	Feed string
	// TaskQueue is the agent's task queue, where chat messages and
	// schedule fires start sessions (default "fastagent").
	TaskQueue string
	// Tools are Go tools offered to the model next to the definition's own.
	Tools []agent.Tool
	// Hooks run around model and tool calls.
	Hooks hooks.Hooks
	// Models are model clients you built, by the "provider/model" spec
	// fastagent.yaml names (see fastagent.Options.Models).
	Models map[string]llms.Model
	// Getenv reads the environment model clients and channels use
	// (default os.Getenv).
	Getenv func(string) string
	// ControlPlane are host:port addresses tools must never reach even with
	// the network on, beside loopback, link-local and private addresses:
	// your Temporal frontend, for one.
	ControlPlane []string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Set is the activity set of one agent: a struct per concern, a method per
// activity. Make it with New; Close it when its workers stopped.
type Set struct {
	Model    *Model
	Tool     *Tool
	Session  *Session
	Turn     *Turn
	Feed     *Feed
	Wake     *Wake
	Channel  *Channel
	Chat     *Chat
	Schedule *Schedule

	impl  iacts.Set
	parts *serve.Parts
}

// New opens what the activities use — the session store, the live feed,
// the agent's definition (a broken one is an error naming its file), the
// model clients, the channels' repliers and the tool sandbox — and returns
// the set. Chat routing and schedule fires use the Temporal client of the
// worker running them. The process is made non-dumpable, as every
// fastagent worker is: tool processes cannot read its memory or
// environment.
func New(ctx context.Context, opts Options) (*Set, error) {
	// The runtime's worker role (non-dumpable, the definition checked),
	// built as every fastagent worker is.
	parts, err := serve.Assemble(ctx, serve.Config{
		Roles: serve.Roles{Worker: true},
		Dir:   opts.Dir, AgentDir: opts.AgentDir, StateDir: opts.StateDir, Store: opts.Store, Feed: opts.Feed,
		TaskQueue: opts.TaskQueue, Tools: opts.Tools, Hooks: opts.Hooks, ModelClients: opts.Models,
		Getenv: opts.Getenv, ControlPlane: opts.ControlPlane, Logger: opts.Logger,
	}, serve.Components{})
	if err != nil {
		return nil, fmt.Errorf("activities: %w", err)
	}
	impl, err := parts.ActivitySet(ctx, nil)
	if err != nil {
		parts.Close()
		return nil, fmt.Errorf("activities: %w", err)
	}
	return newSet(impl, parts), nil
}

func newSet(impl iacts.Set, parts *serve.Parts) *Set {
	return &Set{
		Model: &Model{impl.Acts}, Tool: &Tool{impl.Acts}, Session: &Session{impl.Acts}, Turn: &Turn{impl.Acts},
		Feed: &Feed{impl.Acts}, Wake: &Wake{impl.Acts}, Channel: &Channel{impl.Replies}, Chat: &Chat{impl.Replies},
		Schedule: &Schedule{impl.Firer}, impl: impl, parts: parts,
	}
}

// Close releases the store, the feed and the tool sandbox; later calls are
// no-ops.
func (s *Set) Close() {
	if s != nil && s.parts != nil {
		s.parts.Close()
	}
}

// Registry is where activities are registered: an SDK worker
// (go.temporal.io/sdk/worker.Worker), or a test environment.
type Registry interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Register registers on r the activities of set in groups (none: every
// group), each under its name in the workflows package.
func Register(r Registry, set *Set, groups ...Group) error {
	if set == nil || set.impl.Acts == nil {
		return errors.New("activities: Register needs a set made by activities.New")
	}
	in := make([]iacts.Group, len(groups))
	for i, g := range groups {
		ig, err := iacts.ParseGroup(string(g))
		if err != nil {
			return fmt.Errorf("activities: %w", err)
		}
		in[i] = ig
	}
	iacts.Register(r, set.impl, in...)
	return nil
}

// Model calls the agent's models.
type Model struct{ a *iacts.Activities }

// Generate is Model.Generate: one model step — the session's context read
// from the store, the reply streamed to the live feed, stored, and
// described to the workflow (tool calls, usage, the definition's current
// settings).
func (m *Model) Generate(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
	return m.a.Generate(ctx, call)
}

// Tool runs the agent's tool calls.
type Tool struct{ a *iacts.Activities }

// Execute is Tool.Execute: one tool call run in the tool sandbox (or a
// result the workflow decided, recorded), its result stored.
func (t *Tool) Execute(ctx context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
	return t.a.Execute(ctx, call)
}

// Session keeps a session's transcript.
type Session struct{ a *iacts.Activities }

// Open is Session.Open: the session's current leaf and the definition's
// settings (with the task queues of the model and tools groups).
func (s *Session) Open(ctx context.Context, in workflows.OpenInput) (workflows.OpenResult, error) {
	return s.a.Open(ctx, in)
}

// Compact is Session.Compact: the older part of the branch summarized into
// a compaction entry.
func (s *Session) Compact(ctx context.Context, in workflows.CompactInput) (workflows.CompactResult, error) {
	return s.a.Compact(ctx, in)
}

// Rewind is Session.Rewind: the abandoned branch summarized below the
// rewind's target.
func (s *Session) Rewind(ctx context.Context, in workflows.RewindInput) (workflows.RewindResult, error) {
	return s.a.Rewind(ctx, in)
}

// Turn keeps the session's turn records.
type Turn struct{ a *iacts.Activities }

// Begin is Turn.Begin: a key answered within the idempotency window is
// answered from its record; otherwise the turn's prompt is stored.
func (t *Turn) Begin(ctx context.Context, in workflows.BeginTurnInput) (workflows.BeginTurnResult, error) {
	return t.a.BeginTurn(ctx, in)
}

// Record is Turn.Record: the finished turn's outcome kept under its key and
// published as the turn's last feed message.
func (t *Turn) Record(ctx context.Context, in workflows.RecordTurnInput) error {
	return t.a.Record(ctx, in)
}

// Feed speaks on turns' live feeds.
type Feed struct{ a *iacts.Activities }

// Publish is Feed.Publish: an event the workflow decided (a call waiting
// for approval, the decision) put on the turn's live feed.
func (f *Feed) Publish(ctx context.Context, in workflows.PublishInput) error {
	return f.a.Publish(ctx, in)
}

// Stop is Feed.Stop: every worker told that the turn's running activities
// must stop now.
func (f *Feed) Stop(ctx context.Context, in workflows.TurnStopInput) error {
	return f.a.StopTurn(ctx, in)
}

// Wake computes the agent's self-wakes.
type Wake struct{ a *iacts.Activities }

// Next is Wake.Next: the next instant of a recurring wake-up, in its own
// time zone.
func (w *Wake) Next(ctx context.Context, in workflows.NextWakeInput) (time.Time, error) {
	return w.a.NextWake(ctx, in)
}

// Channel answers on chat platforms.
type Channel struct{ r *iacts.Replies }

// Reply is Channel.Reply: the turn's answer posted (or the posted message
// settled to it).
func (c *Channel) Reply(ctx context.Context, in workflows.ReplyInput) error {
	return c.r.Reply(ctx, in)
}

// Stream is Channel.Stream: the answer rendered live while the turn runs.
func (c *Channel) Stream(ctx context.Context, in workflows.StreamInput) error {
	return c.r.Stream(ctx, in)
}

// Fetch is Channel.Fetch: a message's attachments resolved into its prompt.
func (c *Channel) Fetch(ctx context.Context, in workflows.FetchInput) (agent.Prompt, error) {
	return c.r.Fetch(ctx, in)
}

// Chat routes chat messages to their sessions.
type Chat struct{ r *iacts.Replies }

// Route is Chat.Route: a chat turn handed to its session with
// Signal-With-Start.
func (c *Chat) Route(ctx context.Context, in workflows.RouteInput) error { return c.r.Route(ctx, in) }

// Drop is Chat.Drop: a routed turn whose message was deleted dropped, if
// it still waits in its session's queue.
func (c *Chat) Drop(ctx context.Context, in workflows.DropInput) error { return c.r.Drop(ctx, in) }

// Stop is Chat.Stop: the running turn of a chat's session aborted.
func (c *Chat) Stop(ctx context.Context, in workflows.StopInput) error { return c.r.Stop(ctx, in) }

// Schedule fires the agent's schedules.
type Schedule struct{ f iacts.Firer }

// Fire is Schedule.Fire: one scheduled turn run (or rejoined, by its key)
// and its record returned.
func (s *Schedule) Fire(ctx context.Context, req workflows.FireRequest) (workflows.FireRecord, error) {
	return s.f.Fire(ctx, req)
}
