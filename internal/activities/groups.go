package activities

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"

	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// Group is a set of activities served together: by every worker of the
// session's task queue, or alone on a task queue of its own (model, tools;
// fastagent.yaml's activities: block).
type Group string

// The groups. Model and Tools can run on task queues of their own; the
// others run beside the workflows (most of them are local activities).
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
var Groups = []Group{GroupModel, GroupTools, GroupSession, GroupChannels, GroupSchedules}

// Placeable reports whether g may run on a task queue of its own.
func (g Group) Placeable() bool { return g == GroupModel || g == GroupTools }

// ParseGroup reads a group's name.
func ParseGroup(name string) (Group, error) {
	for _, g := range Groups {
		if string(g) == name {
			return g, nil
		}
	}
	return "", fmt.Errorf("%q is not an activity group (model, tools, session, channels, schedules)", name)
}

// Firer runs the Schedule.Fire activity (schedules.Firer).
type Firer interface {
	Fire(ctx context.Context, req wire.FireRequest) (workflows.FireRecord, error)
}

// Set is the implementation of every activity the workflows call; a nil
// part registers nothing.
type Set struct {
	Acts    *Activities
	Replies *Replies
	Firer   Firer
}

// Entry is one activity: its registered name, its group, whether workflows
// run it as a local activity, and its function.
type Entry struct {
	Name  string
	Group Group
	Local bool
	Fn    any
}

// Entries lists the activities of s, in a fixed order.
func (s Set) Entries() []Entry {
	var out []Entry
	if a := s.Acts; a != nil {
		out = append(out,
			Entry{workflows.ActivityModelGenerate, GroupModel, false, a.Generate},
			Entry{workflows.ActivityCompact, GroupModel, false, a.Compact},
			Entry{workflows.ActivityRewind, GroupModel, false, a.Rewind},
			Entry{workflows.ActivityStepRun, GroupModel, false, a.Step},
			Entry{workflows.ActivityToolExecute, GroupTools, false, a.Execute},
			Entry{workflows.ActivityHookRun, GroupTools, false, a.Hook},
			Entry{workflows.ActivitySessionOpen, GroupSession, true, a.Open},
			Entry{workflows.ActivityTurnBegin, GroupSession, true, a.BeginTurn},
			Entry{workflows.ActivityTurnRecord, GroupSession, false, a.Record},
			Entry{workflows.ActivitySessionExpire, GroupSession, false, a.Expire},
			Entry{workflows.ActivityWakeNext, GroupSession, true, a.NextWake},
			Entry{workflows.ActivityFeedPublish, GroupSession, true, a.Publish},
			Entry{workflows.ActivityFeedStop, GroupSession, true, a.StopTurn},
		)
	}
	if r := s.Replies; r != nil {
		out = append(out,
			Entry{workflows.ActivityChannelReply, GroupChannels, false, r.Reply},
			Entry{workflows.ActivityChannelStream, GroupChannels, false, r.Stream},
			Entry{workflows.ActivityChannelFetch, GroupChannels, false, r.Fetch},
			Entry{workflows.ActivityChatRoute, GroupChannels, true, r.Route},
			Entry{workflows.ActivityChatDrop, GroupChannels, true, r.Drop},
			Entry{workflows.ActivityChatStop, GroupChannels, true, r.Stop},
			Entry{workflows.ActivityChannelSend, GroupChannels, false, r.Send},
			Entry{workflows.ActivityChatCommand, GroupChannels, true, r.Command},
		)
	}
	if s.Firer != nil {
		out = append(out, Entry{workflows.ActivityScheduleFire, GroupSchedules, false, s.Firer.Fire})
	}
	return out
}

// RegistersOn reports whether a worker serving the groups serves says it
// serves registers e. Step.Run (model group) runs tool calls too, so it is
// registered only where the tools group is as well: a worker serving only
// the model group (its own task queue, model credentials) never runs a
// tool. Registering Step.Run is noted on the set (StepRunServed): the
// model calls then tell the workflow that it may schedule Step.Run.
func RegistersOn(e Entry, serves func(Group) bool) bool {
	if e.Name == workflows.ActivityStepRun && !serves(GroupTools) {
		return false
	}
	return serves(e.Group)
}

// Registering notes that e is being registered on a worker (see
// RegistersOn).
func (s Set) Registering(e Entry) {
	if e.Name == workflows.ActivityStepRun && s.Acts != nil {
		s.Acts.stepRun.Store(true)
	}
}

// Register registers on w the activities of s in groups (none: all), each
// under its name in workflows/names.go (see RegistersOn).
func Register(w Registrar, s Set, groups ...Group) {
	for _, e := range s.Entries() {
		if RegistersOn(e, func(g Group) bool { return in(groups, g) }) {
			s.Registering(e)
			w.RegisterActivityWithOptions(e.Fn, activity.RegisterOptions{Name: e.Name})
		}
	}
}

// in reports whether g is among groups (an empty list holds every group).
func in(groups []Group, g Group) bool {
	if len(groups) == 0 {
		return true
	}
	for _, x := range groups {
		if x == g {
			return true
		}
	}
	return false
}

// InProcessFeedApart is the refusal of a worker serving the model or tools
// group apart from the session workflows with the in-process feed.
const InProcessFeedApart = "the model and tools activities running apart publish their live events (text, tool output) and receive " +
	"aborts (stop notices) on the live feed, and an in-process feed is seen by this process alone: the sessions would never see " +
	"their events, and an abort would not stop a running tool or model call before its next heartbeat"
