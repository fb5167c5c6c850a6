package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/tmc/langchaingo/llms"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/hooks"
	iacts "github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/plugin"
	"github.com/fastagent/fastagent/internal/serve"
)

// Group is a set of activities served together: by the workers of the
// session's task queue, or — model and tools — alone, on the task queue
// fastagent.yaml's activities: block places them on.
type Group string

// The groups (see the table in the package documentation).
const (
	// GroupModel calls models: Model.Generate, Session.Compact,
	// Session.Rewind, and Step.Run (a tool step's calls and the next model
	// call, scheduled only where the tools group is served too).
	GroupModel Group = "model"
	// GroupTools runs tool calls and the agent's hooks: Tool.Execute,
	// Hook.Run.
	GroupTools Group = "tools"
	// GroupSession keeps the session's books: Session.Open, Turn.Begin,
	// Turn.Record, Wake.Next, Feed.Publish, Feed.Stop.
	GroupSession Group = "session"
	// GroupChannels answers on chat platforms and routes chat messages:
	// Channel.Reply, Channel.Stream, Channel.Fetch, Chat.Route, Chat.Drop,
	// Chat.Stop, Chat.Command, Channel.Send.
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
	// the agent's other workers and ingresses use. Register of the model
	// or tools group alone needs it named: the session workers' NATS
	// feed, or "inprocess" when they run in this very process (the
	// activities' live events and aborts travel on it).
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
	// the network on, beside loopback, link-local and private addresses
	// and the Temporal frontend of the worker running the tool calls
	// (added by itself, however its client was made).
	ControlPlane []string
	// CodecKeys are the payload codec's keys — those of the agent's
	// other workers: entries "id:base64key" separated by commas, the
	// first encrypts, all decrypt (FASTAGENT_CODEC_KEYS and
	// FASTAGENT_CODEC_KEY_FILE are read when it is empty). With keys, the
	// set is also the Temporal plugin that puts the codec on a client:
	// make the client of the workers you Register it on with it
	// (client.Options.Plugins); Register refuses a worker whose client
	// was not.
	CodecKeys string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Set is the activity set of one agent, what the table in the package
// documentation lists: register it, or some of its groups, with Register.
// Make it with New; Close it when its workers stopped.
//
// Set is also a Temporal plugin (client.Plugin and worker.Plugin): on a
// client it sets the payload codec of Options.CodecKeys (nothing without
// keys), as the worker package's plugin does.
type Set struct {
	*temporal.SimplePlugin

	impl  iacts.Set
	parts *serve.Parts
	guard *plugin.Guard
	// feed is Options.Feed as given ("": not named).
	feed string
}

// New opens what the activities use — the session store, the live feed,
// the agent's definition (a broken one is an error naming its file), the
// model clients, the channels' repliers and the tool sandbox — and returns
// the set. Chat routing and schedule fires use the Temporal client of the
// worker running them. The process is made non-dumpable, as every
// fastagent worker is: tool processes cannot read its memory or
// environment.
func New(ctx context.Context, opts Options) (*Set, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	cdc, err := serve.CodecKeys(opts.CodecKeys, getenv)
	if err != nil {
		return nil, fmt.Errorf("activities: %w", err)
	}
	// The runtime's worker role (non-dumpable, the definition checked),
	// built as every fastagent worker is.
	parts, err := serve.Assemble(ctx, serve.Config{
		Roles: serve.Roles{Worker: true},
		Dir:   opts.Dir, AgentDir: opts.AgentDir, StateDir: opts.StateDir, Store: opts.Store, Feed: opts.Feed,
		TaskQueue: opts.TaskQueue, Tools: opts.Tools, Hooks: opts.Hooks, ModelClients: opts.Models,
		Getenv: opts.Getenv, ControlPlane: opts.ControlPlane, Logger: opts.Logger, Codec: cdc,
	}, serve.Components{})
	if err != nil {
		return nil, fmt.Errorf("activities: %w", err)
	}
	impl, err := parts.ActivitySet(ctx, nil)
	if err != nil {
		parts.Close()
		return nil, fmt.Errorf("activities: %w", err)
	}
	s, err := newSet(impl, parts)
	if err != nil {
		return nil, err
	}
	s.feed = opts.Feed
	return s, nil
}

func newSet(impl iacts.Set, parts *serve.Parts) (*Set, error) {
	var cdc *codec.Codec
	if parts != nil {
		cdc = parts.Config.Codec
	}
	g, err := plugin.NewGuard(cdc)
	if err != nil {
		if parts != nil {
			parts.Close()
		}
		return nil, fmt.Errorf("activities: %w", err)
	}
	s := &Set{SimplePlugin: g.SimplePlugin, impl: impl, parts: parts, guard: g}
	g.Alias(s)
	return s, nil
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
	if r == nil {
		return errors.New("activities: Register needs a worker to register on (go.temporal.io/sdk/worker.New)")
	}
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
	if set.parts != nil && set.feed == "" && apart(in) {
		return fmt.Errorf("activities: Register of the %s group without the session workflows: %s; set Options.Feed to the NATS feed "+
			"the session workers use (nats://host:4222), or to \"inprocess\" when they run in this very process", joinGroups(in), iacts.InProcessFeedApart)
	}
	var err error
	first := true
	iacts.Register(registrar(func(fn any, o activity.RegisterOptions) {
		switch {
		case err != nil:
		case first && set.guard != nil:
			// The first registration tells whether the worker's client
			// carries the set's codec.
			first = false
			if e := set.guard.Registering(o.Name, func() { r.RegisterActivityWithOptions(fn, o) }); e != nil {
				err = fmt.Errorf("activities: Register: %w", e)
			}
		default:
			r.RegisterActivityWithOptions(fn, o)
		}
	}), set.impl, in...)
	return err
}

// registrar is a function registering one activity.
type registrar func(fn any, o activity.RegisterOptions)

func (f registrar) RegisterActivityWithOptions(fn any, o activity.RegisterOptions) { f(fn, o) }

// apart reports whether groups are the model or tools group without the
// session's own (registered beside the workflows, the set is whole).
func apart(groups []iacts.Group) bool {
	if len(groups) == 0 || slices.Contains(groups, iacts.GroupSession) {
		return false
	}
	return slices.ContainsFunc(groups, iacts.Group.Placeable)
}

func joinGroups(groups []iacts.Group) string {
	s := make([]string, len(groups))
	for i, g := range groups {
		s[i] = string(g)
	}
	return strings.Join(s, ", ")
}
