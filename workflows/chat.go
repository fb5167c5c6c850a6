package workflows

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
)

// A chat workflow (ID "chat:<kind>:<chat>") owns what a chat channel must
// remember about one platform conversation — a Slack channel or DM, a
// Feishu chat, a Telegram chat — so that it is exactly-once, survives
// restarts and is visible in the Web UI:
//
//   - which messages (and platform deliveries) it has seen, so a redelivery
//     or an overlapping event is not a second turn;
//   - which thread roots it owns (roots it answered as a summons at the top
//     level), so bare replies there are turns in context mode;
//   - the un-summoned discussion of each place (context mode), folded into
//     that place's next answered turn and dropped only when that turn
//     completes.
//
// It routes each turn to its session workflow (Chat.Route, a local activity
// doing Signal-With-Start) and never runs a model itself.

// ChatPolicy is a channel file's session and group policy, carried with
// every message so that the workflow stays a function of its history.
type ChatPolicy struct {
	// DirectSession is "thread" (default: each top-level direct message
	// starts a thread session) or "continuous" (one session per DM).
	DirectSession string `json:"directSession,omitempty"`
	// GroupSession is "thread" (default) or "continuous" (one session per
	// group chat).
	GroupSession string `json:"groupSession,omitempty"`
	// GroupMode is "mentions" (default: only explicit summons are turns) or
	// "context" (bare replies in owned roots are turns too; other discussion
	// is buffered and folded into the next answered turn).
	GroupMode string `json:"groupMode,omitempty"`
}

// Session and group policy values.
const (
	SessionThread     = "thread"
	SessionContinuous = "continuous"
	GroupMentions     = "mentions"
	GroupContext      = "context"
)

// Attachment is a file of a chat message, by reference: it is resolved
// (downloaded) by the worker when the turn runs, never carried in history.
type Attachment struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	Mime string `json:"mime,omitempty"`
	Size int64  `json:"size,omitempty"`
}

// ChatMessage is one human message a chat channel's door accepted,
// argument of SignalChatMessage.
type ChatMessage struct {
	// Kind is the channel kind ("slack").
	Kind string `json:"kind"`
	// Chat is the platform conversation, unique per kind (Slack:
	// "<team>:<channel>").
	Chat string `json:"chat"`
	// ID is the message's platform ID, unique within Chat (Slack: ts).
	ID string `json:"id"`
	// Event is the platform's delivery ID (Slack event_id), deduplicated
	// besides ID.
	Event string `json:"event,omitempty"`
	// Root is the thread root's ID; "" for a top-level message.
	Root string `json:"root,omitempty"`
	// Direct is set for a one-to-one conversation with the bot.
	Direct bool `json:"direct,omitempty"`
	// Summoned is set when the message explicitly addresses the bot
	// (mention, command, reply to the bot).
	Summoned bool   `json:"summoned,omitempty"`
	User     string `json:"user,omitempty"`
	// UserName is how the sender is shown in folded context.
	UserName    string       `json:"userName,omitempty"`
	Text        string       `json:"text"`
	Attachments []Attachment `json:"attachments,omitempty"`
	// Data is the platform's extra reply data (Slack: the team), passed to
	// the replier in Target.Data.
	Data   json.RawMessage `json:"data,omitempty"`
	Policy ChatPolicy      `json:"policy"`
	// UniqueIDs says message IDs are unique across the platform's chats
	// (Feishu/Lark): a thread session is then named "<kind>:<root>", which
	// keeps it short.
	UniqueIDs bool `json:"uniqueIds,omitempty"`
	// Stop asks to stop the running turn of the message's session (a
	// Telegram /stop) instead of being a turn.
	Stop bool `json:"stop,omitempty"`
	// MentionsOthers is set when the message @mentions people but not the
	// bot: in context mode it is discussion between them (buffered), not a
	// turn, even as a bare reply in a thread the bot owns.
	MentionsOthers bool `json:"mentionsOthers,omitempty"`
	// Deleted says the message ID was deleted (Slack message_deleted) or
	// recalled (Feishu/Lark) on the platform: it is not a turn; a turn it
	// started that still waits in its session's queue is dropped, and its
	// buffered line (not yet folded) is removed.
	Deleted bool `json:"deleted,omitempty"`
	// Edited says the message ID was edited (Telegram edited_message,
	// Slack message_changed); Text and Attachments are its new content. An
	// edit never starts or re-runs a turn: it only replaces the message's
	// buffered line while that line is not yet folded into a turn.
	Edited bool `json:"edited,omitempty"`
}

// DropInput is the argument of ActivityChatDrop: abort Turn of Session
// only while it waits in the session's queue.
type DropInput struct {
	Session string `json:"session"`
	Turn    string `json:"turn"`
	Reason  string `json:"reason,omitempty"`
	// Reply is the turn's reply target: a reply already mounted for the
	// waiting turn is settled to a note saying why it is not answered.
	Reply *ReplyTarget `json:"reply,omitempty"`
}

// StopInput is the argument of ActivityChatStop: abort the running turn
// of Session.
type StopInput struct {
	Session string `json:"session"`
	Reason  string `json:"reason,omitempty"`
	// Key is the stop message's turn key: the abort's update ID derives
	// from it, so a retried stop is the same stop, bound to the turn it
	// found running ("": a new ID per attempt).
	Key string `json:"key,omitempty"`
}

// changeChatStop versions the chat workflow's handling of stop messages
// (ChatMessage.Stop).
const changeChatStop = "chat-stop"

// changeChatEdits versions the chat workflow's handling of deleted
// (recalled) and edited messages (ChatMessage.Deleted, Edited): Chat.Drop
// of the turn a deleted message started, buffered lines removed or
// replaced.
const changeChatEdits = "chat-edits"

// changeChatDurable versions, from a run's start: seen IDs kept by time
// (ChatState.SeenAt, chatSeenWindow) instead of by count; Chat.Route as a
// regular activity retried without a total limit, so a message the door
// acknowledged is routed however long Temporal or the session is
// unreachable; a bare reply that @mentions only other people buffered in
// context mode; buffered files passed to the turn as background input.
const changeChatDurable = "chat-durable"

// changeChatBytes versions, from a run's start, a byte bound on the chat
// workflow's state, which continue-as-new carries (Temporal refuses a
// payload over 2 MB): a buffered line keeps at most what a fold shows, the
// buffers, the seen IDs and the routes each have a byte budget (the oldest
// go first, the seen IDs with a warning).
const changeChatBytes = "chat-bytes"

// Target is where a chat turn's reply goes; it is the Data of the turn's
// ReplyTarget, read by the channel's replier.
type Target struct {
	// Chat is the platform conversation ("<team>:<channel>" for Slack).
	Chat string `json:"chat"`
	// Thread is the root message to reply under; "" replies at the top
	// level of Chat.
	Thread string `json:"thread,omitempty"`
	// Message is the user message being answered.
	Message string `json:"message,omitempty"`
	// User is its sender.
	User string `json:"user,omitempty"`
	// Attachments are the message's files, resolved when the turn runs.
	Attachments []Attachment `json:"attachments,omitempty"`
	// Background are the files of buffered discussion folded into the
	// turn: resolved when it runs as background input, each degrading on
	// its own (a file that cannot be read is named, the turn goes on).
	Background []Attachment    `json:"background,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
	// Turn is the turn's key, set by the worker (never in history) for
	// repliers that mark their messages with it.
	Turn string `json:"turn,omitempty"`
}

// TurnDone is the argument of SignalTurnDone: a session tells the chat
// workflow that routed a turn how it ended.
type TurnDone struct {
	Key       string `json:"key"`
	Completed bool   `json:"completed"`
}

// RouteInput is the argument of ActivityChatRoute: hand Delivery to the
// session workflow of Session with Signal-With-Start.
type RouteInput struct {
	Session  string   `json:"session"`
	Delivery Delivery `json:"delivery"`
}

// ChatInput starts (or continues) a chat workflow.
type ChatInput struct {
	Kind string `json:"kind"`
	Chat string `json:"chat"`
	// Scope is the agent the conversation belongs to when several agents
	// are served ("" for the main agent): its sessions are "<scope>/…" and
	// its workflow is ScopedChatWorkflowID's.
	Scope string     `json:"scope,omitempty"`
	State *ChatState `json:"state,omitempty"`
	// SignalsPerRun overrides how many signals a run handles before it
	// continues as new (tests).
	SignalsPerRun int `json:"signalsPerRun,omitempty"`
}

// ChatState is the chat workflow's durable state, carried across
// continue-as-new. Every list is bounded.
type ChatState struct {
	// Seen holds recent message and delivery IDs, oldest first.
	Seen []string `json:"seen,omitempty"`
	// SeenAt holds when each ID of Seen was seen (Unix seconds), in step
	// with it; an ID is kept for chatSeenWindow. Empty in states written
	// before it existed (their IDs count as seen at the run's start).
	SeenAt []int64 `json:"seenAt,omitempty"`
	// Owned holds the thread roots the bot owns, oldest first.
	Owned []string `json:"owned,omitempty"`
	// Buffers holds un-summoned discussion per place ("" = top level,
	// else a thread root).
	Buffers []ChatBuffer `json:"buffers,omitempty"`
	// Routed counts the turns routed so far.
	Routed int `json:"routed,omitempty"`
	// Routes holds the last turns routed, oldest first, so a deletion of
	// their message can drop them while they wait.
	Routes []ChatRoute `json:"routes,omitempty"`
}

// ChatRoute is one routed turn: its message, session, key and reply target.
type ChatRoute struct {
	ID      string       `json:"id"`
	Session string       `json:"session"`
	Key     string       `json:"key"`
	Reply   *ReplyTarget `json:"reply,omitempty"`
}

// ChatBuffer is one place's buffered discussion.
type ChatBuffer struct {
	Place    string         `json:"place"`
	Messages []BufferedLine `json:"messages"`
}

// BufferedLine is one buffered message; Turn is set while a routed turn
// has folded it (it is dropped when that turn completes).
type BufferedLine struct {
	ID          string       `json:"id"`
	User        string       `json:"user,omitempty"`
	Text        string       `json:"text,omitempty"`
	Attachments []Attachment `json:"attachments,omitempty"`
	Turn        string       `json:"turn,omitempty"`
}

// Bounds of a chat workflow's state and run.
const (
	chatSeenLimit = 2000
	// chatSeenWindow is how long a seen message or delivery ID is kept,
	// longer than every platform's redelivery window: Slack retries for
	// about 5 minutes, Feishu/Lark for about 7 hours (15 s, 5 min, 1 h,
	// 6 h), Telegram keeps an undelivered update for 24 hours.
	chatSeenWindow = 25 * time.Hour
	// chatSeenCap bounds the seen IDs however busy the conversation is
	// (about 1 MB of state); past it the oldest go first, with a warning.
	chatSeenCap        = 30000
	chatOwnedLimit     = 2000
	chatRoutesLimit    = 100
	chatPlacesLimit    = 200
	chatBufferLimit    = 50
	chatSignalsPerRun  = 1000
	chatRouteTimeout   = 30 * time.Second
	chatFoldTextLimit  = 2000
	chatFoldTotalLimit = 16000
	// Byte budgets of the state (changeChatBytes): together well under
	// Temporal's 2 MB payload limit.
	chatLineFiles    = 20
	chatBufferBytes  = 256 << 10
	chatSeenBytes    = 384 << 10
	chatRoutesBytes  = 128 << 10
	chatSeenOverhead = 16
)

// ChatWorkflowID is the workflow ID of a platform conversation.
func ChatWorkflowID(kind, chat string) string { return "chat:" + kind + ":" + chat }

// ScopedChatWorkflowID is the chat workflow of a conversation of agent
// scope: "chat:<scope>/<kind>:<chat>" ("" is the main agent's,
// ChatWorkflowID).
func ScopedChatWorkflowID(scope, kind, chat string) string {
	if scope == "" {
		return ChatWorkflowID(kind, chat)
	}
	return "chat:" + scope + "/" + kind + ":" + chat
}

// ScopedSession is session of agent scope: "<scope>/<session>" ("" is the
// main agent's, unchanged), as its HTTP routes name it.
func ScopedSession(scope, session string) string {
	if scope == "" {
		return session
	}
	return scope + "/" + session
}

// ChatSession names the session a chat turn runs in: "<kind>:<chat>:<root>"
// for a thread session, "<kind>:<chat>" for a continuous one.
func ChatSession(kind, chat, root string) string {
	if root == "" {
		return kind + ":" + chat
	}
	return kind + ":" + chat + ":" + root
}

// ChatTurnKey is the turn (idempotency) key of a chat message.
func ChatTurnKey(kind, chat, id string) string { return kind + ":" + chat + ":" + id }

type chat struct {
	in    ChatInput
	st    ChatState
	seen  map[string]bool
	owned map[string]bool
	// durable is the changeChatDurable version of the run, bytes its
	// changeChatBytes version.
	durable workflow.Version
	bytes   workflow.Version
	// seenBytes is what Seen weighs (changeChatBytes).
	seenBytes int
}

// ChatWorkflow is the long-lived workflow of one platform conversation. It
// receives SignalChatMessage and SignalTurnDone, decides for each message
// whether it is a turn, buffered context or nothing, and routes turns to
// their session workflows.
func ChatWorkflow(ctx workflow.Context, in ChatInput) error {
	c := &chat{in: in, seen: map[string]bool{}, owned: map[string]bool{}}
	if in.State != nil {
		c.st = *in.State
	}
	c.durable = workflow.GetVersion(ctx, changeChatDurable, workflow.DefaultVersion, 1)
	c.bytes = workflow.GetVersion(ctx, changeChatBytes, workflow.DefaultVersion, 1)
	if c.durable >= 1 && len(c.st.SeenAt) != len(c.st.Seen) {
		// A state from before SeenAt: its IDs count as seen now.
		now := workflow.Now(ctx).Unix()
		c.st.SeenAt = make([]int64, len(c.st.Seen))
		for i := range c.st.SeenAt {
			c.st.SeenAt[i] = now
		}
	}
	for _, id := range c.st.Seen {
		c.seen[id] = true
		c.seenBytes += len(id) + chatSeenOverhead
	}
	for _, id := range c.st.Owned {
		c.owned[id] = true
	}
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (ChatState, error) { return c.st, nil }); err != nil {
		return fmt.Errorf("register %s: %w", QueryState, err)
	}
	msgs := workflow.GetSignalChannel(ctx, SignalChatMessage)
	done := workflow.GetSignalChannel(ctx, SignalTurnDone)
	upgrade := workflow.GetSignalChannel(ctx, SignalUpgrade)
	handled := 0
	for {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(msgs, func(ch workflow.ReceiveChannel, _ bool) {
			var m ChatMessage
			ch.Receive(ctx, &m)
			c.onMessage(ctx, m)
		})
		sel.AddReceive(done, func(ch workflow.ReceiveChannel, _ bool) {
			var d TurnDone
			ch.Receive(ctx, &d)
			c.onTurnDone(d)
		})
		sel.AddReceive(upgrade, func(ch workflow.ReceiveChannel, _ bool) {
			// Only the workflow task matters: it reports a moved target.
			ch.Receive(ctx, nil)
		})
		sel.Select(ctx)
		handled++
		limit := chatSignalsPerRun
		if in.SignalsPerRun > 0 {
			limit = in.SignalsPerRun
		}
		info := workflow.GetInfo(ctx)
		if handled >= limit || info.GetContinueAsNewSuggested() || info.GetTargetWorkerDeploymentVersionChanged() {
			// Drain what has arrived, then start a fresh history with the
			// state only.
			for {
				var m ChatMessage
				if msgs.ReceiveAsync(&m) {
					c.onMessage(ctx, m)
					continue
				}
				var d TurnDone
				if done.ReceiveAsync(&d) {
					c.onTurnDone(d)
					continue
				}
				break
			}
			st := c.st
			return workflow.NewContinueAsNewErrorWithOptions(ctx, upgradeOnContinue, ChatWorkflowType, ChatInput{Kind: c.in.Kind, Chat: c.in.Chat, Scope: c.in.Scope, State: &st, SignalsPerRun: in.SignalsPerRun})
		}
	}
}

// onMessage applies the channel policy to one message: a fresh message
// with content is a turn routed to its session, buffered context, or
// nothing.
func (c *chat) onMessage(ctx workflow.Context, m ChatMessage) {
	if !c.admit(ctx, m) {
		return
	}
	to, ok := c.placeTurn(m)
	if !ok {
		return
	}
	c.routeMessage(ctx, m, to)
}

// admit deduplicates m and handles what is never a turn (a message of
// another conversation, a deletion, an edit, a stop, an empty message);
// it reports whether m goes on to the group and session policy.
func (c *chat) admit(ctx workflow.Context, m ChatMessage) bool {
	if m.ID == "" || m.Kind != c.in.Kind || m.Chat != c.in.Chat {
		workflow.GetLogger(ctx).Warn("chat message for another conversation or without an ID ignored", "kind", m.Kind, "chat", m.Chat, "id", m.ID)
		return false
	}
	if m.Deleted {
		c.deleted(ctx, m)
		return false
	}
	if m.Edited {
		c.edited(ctx, m)
		return false
	}
	if c.seen[m.ID] || (m.Event != "" && c.seen["event:"+m.Event]) {
		return false
	}
	c.see(ctx, m.ID)
	if m.Event != "" {
		c.see(ctx, "event:"+m.Event)
	}
	if m.Stop {
		c.stop(ctx, m)
		return false
	}
	return strings.TrimSpace(m.Text) != "" || len(m.Attachments) > 0
}

// turnPlace is where a message's turn runs: its session, the thread its
// reply goes to, and the place whose buffered discussion it folds ("" =
// none, or the top level of a group).
type turnPlace struct {
	session, thread, place string
}

// placeTurn applies the session and group policy to an admitted message:
// the place of its turn, or false when it is not a turn (in context mode
// it is then buffered). A top-level summons makes its message an owned
// root.
func (c *chat) placeTurn(m ChatMessage) (turnPlace, bool) {
	p := m.Policy
	sessionOf := func(root string) string {
		if m.UniqueIDs && root != "" {
			return ScopedSession(c.in.Scope, m.Kind+":"+root)
		}
		return ScopedSession(c.in.Scope, ChatSession(m.Kind, m.Chat, root))
	}
	switch {
	case m.Direct:
		if p.DirectSession == SessionContinuous {
			return turnPlace{session: sessionOf(""), thread: m.Root}, true
		}
		root := m.Root
		if root == "" {
			root = m.ID
		}
		return turnPlace{session: sessionOf(root), thread: root}, true
	case m.Summoned || (p.GroupMode == GroupContext && m.Root != "" && c.owned[m.Root] && (c.durable < 1 || !m.MentionsOthers)):
		switch {
		case p.GroupSession == SessionContinuous:
			return turnPlace{session: sessionOf(""), thread: m.Root, place: m.Root}, true
		case m.Root == "":
			// Only a top-level summons creates an owned root.
			c.own(m.ID)
			return turnPlace{session: sessionOf(m.ID), thread: m.ID}, true
		default:
			// A thread it owns continues; a summons inside someone
			// else's thread answers there without adopting it.
			return turnPlace{session: sessionOf(m.Root), thread: m.Root, place: m.Root}, true
		}
	case p.GroupMode == GroupContext:
		c.buffer(m)
	}
	return turnPlace{}, false
}

// routeMessage makes m a turn at to: it folds the place's buffered
// discussion into the prompt, routes the delivery to the session and
// records the route. A turn that cannot be routed releases what it folded.
func (c *chat) routeMessage(ctx workflow.Context, m ChatMessage, to turnPlace) {
	log := workflow.GetLogger(ctx)
	d, folded, err := c.delivery(m, to)
	if err != nil {
		log.Error("chat: reply target", "error", err)
		return
	}
	if folded > 0 {
		d.Notify = ScopedChatWorkflowID(c.in.Scope, c.in.Kind, c.in.Chat)
	}
	if err := c.route(ctx, RouteInput{Session: to.session, Delivery: d}); err != nil {
		// The session could not be reached even after retries: release
		// the folded lines for the next turn.
		log.Error("chat: route failed", "session", to.session, "key", d.Key, "error", err)
		c.onTurnDone(TurnDone{Key: d.Key})
		return
	}
	c.st.Routed++
	c.st.Routes = append(c.st.Routes, ChatRoute{ID: m.ID, Session: to.session, Key: d.Key, Reply: d.Reply})
	if n := len(c.st.Routes) - chatRoutesLimit; n > 0 {
		c.st.Routes = append([]ChatRoute(nil), c.st.Routes[n:]...)
	}
	if c.bytes >= 1 {
		// The newest route always stays (its deletion can still drop it).
		size := func(r ChatRoute) int {
			n := len(r.ID) + len(r.Session) + len(r.Key) + 64
			if r.Reply != nil {
				n += len(r.Reply.Kind) + len(r.Reply.Data)
			}
			return n
		}
		total, keep := 0, len(c.st.Routes)
		for keep > 0 && (keep == len(c.st.Routes) || total+size(c.st.Routes[keep-1]) <= chatRoutesBytes) {
			total += size(c.st.Routes[keep-1])
			keep--
		}
		if keep > 0 {
			c.st.Routes = append([]ChatRoute(nil), c.st.Routes[keep:]...)
		}
	}
}

// delivery is m's turn as its session receives it: its key, the prompt
// with the place's buffered discussion folded in (folded counts the lines)
// and the reply target.
func (c *chat) delivery(m ChatMessage, to turnPlace) (d Delivery, folded int, err error) {
	key := ChatTurnKey(m.Kind, m.Chat, m.ID)
	if m.UniqueIDs {
		key = m.Kind + ":" + m.ID
	}
	prompt, folded, background := c.fold(to.place, key, m)
	if m.Direct {
		folded = 0
	}
	if c.durable < 1 {
		background = nil
	}
	// A struct without maps encodes the same bytes every time.
	//workflowcheck:ignore
	target, err := json.Marshal(Target{Chat: m.Chat, Thread: to.thread, Message: m.ID, User: m.User,
		Attachments: m.Attachments, Background: background, Data: m.Data})
	if err != nil {
		return Delivery{}, 0, err
	}
	return Delivery{Key: key, Source: m.Kind, Prompt: prompt, Reply: &ReplyTarget{Kind: m.Kind, Data: target}}, folded, nil
}

// edited handles an edit of message m.ID: it never starts or re-runs a
// turn; the message's buffered line, while not yet folded into a turn,
// takes the new text and files. A redelivered edit is deduplicated by its
// delivery ID.
func (c *chat) edited(ctx workflow.Context, m ChatMessage) {
	if m.Event != "" && c.seen["event:"+m.Event] {
		return
	}
	if workflow.GetVersion(ctx, changeChatEdits, workflow.DefaultVersion, 1) < 1 {
		return
	}
	if m.Event != "" {
		c.see(ctx, "event:"+m.Event)
	}
	for bi := range c.st.Buffers {
		for li := range c.st.Buffers[bi].Messages {
			if l := &c.st.Buffers[bi].Messages[li]; l.ID == m.ID && l.Turn == "" {
				l.Text, l.Attachments = m.Text, m.Attachments
			}
		}
	}
}

// deleted handles the deletion (recall) of message m.ID: a buffered line
// not yet folded into a turn is removed; a turn the message started is
// dropped by Chat.Drop if it still waits in its session's queue (a running
// or answered turn is left as it is); a later delivery of the message is
// not a turn. A redelivered deletion does nothing.
func (c *chat) deleted(ctx workflow.Context, m ChatMessage) {
	mark := "deleted:" + m.ID
	if c.seen[mark] || (m.Event != "" && c.seen["event:"+m.Event]) {
		return
	}
	if workflow.GetVersion(ctx, changeChatEdits, workflow.DefaultVersion, 1) < 1 {
		return
	}
	c.see(ctx, mark)
	if m.Event != "" {
		c.see(ctx, "event:"+m.Event)
	}
	if !c.seen[m.ID] {
		c.see(ctx, m.ID)
	}
	for bi := range c.st.Buffers {
		b := &c.st.Buffers[bi]
		kept := b.Messages[:0]
		for _, l := range b.Messages {
			if l.ID != m.ID || l.Turn != "" {
				kept = append(kept, l)
			}
		}
		b.Messages = kept
	}
	c.dropEmptyBuffers()
	for i, r := range c.st.Routes {
		if r.ID != m.ID {
			continue
		}
		c.st.Routes = append(c.st.Routes[:i:i], c.st.Routes[i+1:]...)
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: chatRouteTimeout,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
		})
		in := DropInput{Session: r.Session, Turn: r.Key, Reply: r.Reply, Reason: "its message was deleted before the turn started"}
		if err := workflow.ExecuteLocalActivity(lctx, ActivityChatDrop, in).Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("chat: drop of a deleted message's turn failed", "session", r.Session, "turn", r.Key, "error", err)
		}
		return
	}
}

// route hands a turn to its session. Since changeChatDurable it is a
// regular activity retried without a total limit (only a non-retryable
// error ends it): a message the door acknowledged is routed however long
// Temporal is throttled or restarting, and survives a worker restart.
func (c *chat) route(ctx workflow.Context, in RouteInput) error {
	if c.durable >= 1 {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: chatRouteTimeout,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 30 * time.Second},
			Summary:             "route · turn " + in.Delivery.Key,
		})
		return workflow.ExecuteActivity(actx, ActivityChatRoute, in).Get(ctx, nil)
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: chatRouteTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 10 * time.Second},
	})
	return workflow.ExecuteLocalActivity(lctx, ActivityChatRoute, in).Get(ctx, nil)
}

// stop aborts the running turn of the session m would be routed to (the
// conversation's continuous session, or its thread's session).
func (c *chat) stop(ctx workflow.Context, m ChatMessage) {
	if workflow.GetVersion(ctx, changeChatStop, workflow.DefaultVersion, 1) < 1 {
		return
	}
	p := m.Policy
	continuous := (m.Direct && p.DirectSession == SessionContinuous) || (!m.Direct && p.GroupSession == SessionContinuous)
	var session string
	switch {
	case continuous:
		session = ChatSession(m.Kind, m.Chat, "")
	case m.Root != "" && m.UniqueIDs:
		session = m.Kind + ":" + m.Root
	case m.Root != "":
		session = ChatSession(m.Kind, m.Chat, m.Root)
	default:
		return // a top-level message has no thread session to stop
	}
	session = ScopedSession(c.in.Scope, session)
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: chatRouteTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
	})
	key := ChatTurnKey(m.Kind, m.Chat, m.ID)
	if m.UniqueIDs {
		key = m.Kind + ":" + m.ID
	}
	in := StopInput{Session: session, Reason: "stopped by " + displayUser(m.UserName) + " in the chat", Key: key}
	if err := workflow.ExecuteLocalActivity(lctx, ActivityChatStop, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("chat: stop failed", "session", session, "error", err)
	}
}

// fold prefixes the message with its place's buffered discussion not yet
// folded into another turn, and marks those lines as folded by key. It
// returns the folded lines' files too.
func (c *chat) fold(place, key string, m ChatMessage) (agent.Prompt, int, []Attachment) {
	prompt := agent.Prompt{Text: m.Text}
	b := c.bufferOf(place, false)
	if b == nil {
		return prompt, 0, nil
	}
	var files []Attachment
	var lines []string
	total, n := 0, 0
	for i := range b.Messages {
		l := &b.Messages[i]
		if l.Turn != "" {
			continue
		}
		text := l.Text
		if len(text) > chatFoldTextLimit {
			text = text[:chatFoldTextLimit] + "…"
		}
		for _, a := range l.Attachments {
			text += fmt.Sprintf(" [file: %s]", a.Name)
		}
		line := fmt.Sprintf("- %s: %s", displayUser(l.User), text)
		if total+len(line) > chatFoldTotalLimit {
			break
		}
		total += len(line)
		lines = append(lines, line)
		files = append(files, l.Attachments...)
		l.Turn = key
		n++
	}
	if n == 0 {
		return prompt, 0, nil
	}
	prompt.Text = "Messages in this conversation since you last answered (context, not addressed to you):\n" +
		strings.Join(lines, "\n") + "\n\nThe message addressed to you:\n" + m.Text
	return prompt, n, files
}

func displayUser(u string) string {
	if u == "" {
		return "someone"
	}
	return u
}

// onTurnDone commits (completed) or releases (failed) the lines a routed
// turn had folded.
func (c *chat) onTurnDone(d TurnDone) {
	for bi := range c.st.Buffers {
		b := &c.st.Buffers[bi]
		kept := b.Messages[:0]
		for _, l := range b.Messages {
			if l.Turn == d.Key {
				if d.Completed {
					continue
				}
				l.Turn = ""
			}
			kept = append(kept, l)
		}
		b.Messages = kept
	}
	c.dropEmptyBuffers()
}

func (c *chat) buffer(m ChatMessage) {
	b := c.bufferOf(m.Root, true)
	name := m.UserName
	if name == "" {
		name = m.User
	}
	line := BufferedLine{ID: m.ID, User: name, Text: m.Text, Attachments: m.Attachments}
	if c.bytes >= 1 {
		// A fold shows chatFoldTextLimit bytes of a line: keep a rune
		// more, so it still knows the line was longer.
		line.Text = clipUTF8(line.Text, chatFoldTextLimit+utf8.UTFMax)
		line.User = clipUTF8(line.User, 256)
		if len(line.Attachments) > chatLineFiles {
			line.Attachments = line.Attachments[:chatLineFiles]
		}
	}
	b.Messages = append(b.Messages, line)
	if n := len(b.Messages) - chatBufferLimit; n > 0 {
		b.Messages = append([]BufferedLine(nil), b.Messages[n:]...)
	}
	if c.bytes >= 1 {
		c.trimBuffers()
	}
}

// lineBytes is what a buffered line weighs in the state.
func lineBytes(l BufferedLine) int {
	n := len(l.ID) + len(l.User) + len(l.Text) + len(l.Turn) + 48
	for _, a := range l.Attachments {
		n += len(a.ID) + len(a.Name) + len(a.Mime) + 48
	}
	return n
}

// trimBuffers drops the oldest buffered lines, across places, until the
// buffers fit chatBufferBytes.
func (c *chat) trimBuffers() {
	total := 0
	for _, b := range c.st.Buffers {
		for _, l := range b.Messages {
			total += lineBytes(l)
		}
	}
	for total > chatBufferBytes && len(c.st.Buffers) > 0 {
		// The oldest line is the first of the place buffered longest ago
		// (places are kept in order of creation).
		b := &c.st.Buffers[0]
		if len(b.Messages) == 0 {
			c.st.Buffers = c.st.Buffers[1:]
			continue
		}
		total -= lineBytes(b.Messages[0])
		b.Messages = b.Messages[1:]
	}
	c.dropEmptyBuffers()
}

// clipUTF8 cuts s to at most n bytes on a rune boundary.
func clipUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (c *chat) bufferOf(place string, create bool) *ChatBuffer {
	for i := range c.st.Buffers {
		if c.st.Buffers[i].Place == place {
			return &c.st.Buffers[i]
		}
	}
	if !create {
		return nil
	}
	if len(c.st.Buffers) >= chatPlacesLimit {
		c.st.Buffers = append([]ChatBuffer(nil), c.st.Buffers[1:]...)
	}
	c.st.Buffers = append(c.st.Buffers, ChatBuffer{Place: place})
	return &c.st.Buffers[len(c.st.Buffers)-1]
}

func (c *chat) dropEmptyBuffers() {
	kept := c.st.Buffers[:0]
	for _, b := range c.st.Buffers {
		if len(b.Messages) > 0 {
			kept = append(kept, b)
		}
	}
	c.st.Buffers = kept
}

func (c *chat) see(ctx workflow.Context, id string) {
	c.seen[id] = true
	c.st.Seen = append(c.st.Seen, id)
	c.seenBytes += len(id) + chatSeenOverhead
	if c.durable >= 1 {
		// Kept by time: drop what is older than the window, and past the
		// cap (since changeChatBytes: the byte budget) the oldest whatever
		// their age.
		now := workflow.Now(ctx)
		c.st.SeenAt = append(c.st.SeenAt, now.Unix())
		horizon := now.Add(-chatSeenWindow).Unix()
		n, bytes := 0, c.seenBytes
		over := func() bool {
			if c.bytes >= 1 {
				return bytes > chatSeenBytes
			}
			return len(c.st.Seen)-n > chatSeenCap
		}
		for n < len(c.st.SeenAt) && (c.st.SeenAt[n] < horizon || over()) {
			bytes -= len(c.st.Seen[n]) + chatSeenOverhead
			n++
		}
		c.seenBytes = bytes
		if n > 0 {
			if c.st.SeenAt[n-1] >= horizon {
				workflow.GetLogger(ctx).Warn("chat: more IDs seen within the dedup window than kept; the oldest are forgotten early",
					"kept", chatSeenCap, "window", chatSeenWindow.String())
			}
			for _, old := range c.st.Seen[:n] {
				delete(c.seen, old)
			}
			c.st.Seen = append([]string(nil), c.st.Seen[n:]...)
			c.st.SeenAt = append([]int64(nil), c.st.SeenAt[n:]...)
		}
		return
	}
	if n := len(c.st.Seen) - chatSeenLimit; n > 0 {
		for _, old := range c.st.Seen[:n] {
			delete(c.seen, old)
		}
		c.st.Seen = append([]string(nil), c.st.Seen[n:]...)
	}
}

func (c *chat) own(root string) {
	if c.owned[root] {
		return
	}
	c.owned[root] = true
	c.st.Owned = append(c.st.Owned, root)
	if n := len(c.st.Owned) - chatOwnedLimit; n > 0 {
		for _, old := range c.st.Owned[:n] {
			delete(c.owned, old)
		}
		c.st.Owned = append([]string(nil), c.st.Owned[n:]...)
	}
}
