package workflows

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Custom search attributes of session workflows, so that sessions can be
// found in the Web UI and with `fastagent session list`. All are Keyword
// attributes; they must be registered on the namespace (the embedded server
// registers them at start; elsewhere `fastagent search-attributes create`).
const (
	// AttrAgent is the agent serving the session: its task queue.
	AttrAgent = "FastAgentAgent"
	// AttrPrincipal is the API principal that created the session ("" for
	// sessions a channel or schedule started).
	AttrPrincipal = "FastAgentPrincipal"
	// AttrChannel is the kind of caller that created the session: http,
	// schedule, slack, feishu, telegram, github, hook:<name> (a webhook
	// endpoint), …
	AttrChannel = "FastAgentChannel"
	// AttrParent is the session that started this one (delegation).
	AttrParent = "FastAgentParent"
	// AttrStatus says whether the session waits for a person: StatusWaiting
	// or StatusAsking while it does, StatusIdle otherwise (a turn may be
	// running: that changes every few seconds and would cost two upserts,
	// billed actions, per turn; the session's state query shows it).
	AttrStatus = "FastAgentStatus"
)

// Values of AttrStatus.
const (
	StatusIdle    = "idle"
	StatusWaiting = "waiting_approval"
	// StatusAsking: the running turn waits for the answer to a question
	// it asked (ask_user).
	StatusAsking = "waiting_answer"
)

// Typed keys of the session search attributes.
var (
	KeyAgent     = temporal.NewSearchAttributeKeyKeyword(AttrAgent)
	KeyPrincipal = temporal.NewSearchAttributeKeyKeyword(AttrPrincipal)
	KeyChannel   = temporal.NewSearchAttributeKeyKeyword(AttrChannel)
	KeyParent    = temporal.NewSearchAttributeKeyKeyword(AttrParent)
	KeyStatus    = temporal.NewSearchAttributeKeyKeyword(AttrStatus)
)

// SearchAttributeNames lists the session search attributes (all Keyword).
func SearchAttributeNames() []string {
	return []string{AttrAgent, AttrPrincipal, AttrChannel, AttrParent, AttrStatus}
}

// SessionAttrs are what a session is found by, set when its workflow
// starts (start-time search attributes cost no upsert).
type SessionAttrs struct {
	Agent     string
	Principal string
	Channel   string
	Parent    string
}

// SearchAttributes returns the start-time search attributes of a session:
// the non-empty attrs, and the status idle. A run started with AttrStatus
// set upserts its status as turns run; one started without it (the
// attributes are not registered) never upserts.
func (a SessionAttrs) SearchAttributes() temporal.SearchAttributes {
	updates := []temporal.SearchAttributeUpdate{KeyStatus.ValueSet(StatusIdle)}
	for _, kv := range []struct {
		key temporal.SearchAttributeKeyKeyword
		val string
	}{{KeyAgent, a.Agent}, {KeyPrincipal, a.Principal}, {KeyChannel, a.Channel}, {KeyParent, a.Parent}} {
		if kv.val != "" {
			updates = append(updates, kv.key.ValueSet(kv.val))
		}
	}
	return temporal.NewSearchAttributes(updates...)
}

// initStatus reads the run's start-time status: a run started with it
// keeps its status up to date (searchable: AttrStatus upserted when a wait
// for a person begins and when it ends); a run started without the
// attributes upserts nothing.
//
// Every run starts idle (SessionAttrs.SearchAttributes; continue-as-new
// happens between turns), and the value is not read back: the started
// event a worker replays can show the status as last upserted rather than
// as started (seen on the embedded server), and a replay must issue the
// same upserts as the run did.
func (s *session) initStatus(ctx workflow.Context) {
	_, s.searchable = workflow.GetTypedSearchAttributes(ctx).GetKeyword(KeyStatus)
	s.status = StatusIdle
}

// setStatus upserts AttrStatus when it changes; each upsert is a billed
// action on Temporal Cloud, so nothing else is upserted and an unchanged
// status costs nothing.
func (s *session) setStatus(ctx workflow.Context, status string) {
	if !s.searchable || s.status == status {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, KeyStatus.ValueSet(status)); err != nil {
		workflow.GetLogger(ctx).Warn("upserting the session status failed", "status", status, "error", err)
		return
	}
	s.status = status
}
