package workflows

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
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
//     that place's next answered turn (its files passed to the turn as
//     background input) and dropped only when that turn completes; a bare
//     reply that @mentions only other people is buffered too.
//
// It routes each turn to its session workflow (Chat.Route, a regular
// activity doing Signal-With-Start, retried without a total limit: a
// message the door acknowledged is routed however long Temporal or the
// session is unreachable) and never runs a model itself. A stop message
// (ChatMessage.Stop) aborts the running turn of its session (Chat.Stop); a
// deleted (recalled) message drops the turn it started while that waits
// (Chat.Drop), and a deleted or edited message's buffered line is removed
// or replaced.
//
// Its state is bounded in bytes, since continue-as-new carries it
// (Temporal refuses a payload over 2 MB): it is weighed as it is encoded
// (in JSON "<", ">" and "&" are six bytes each), a buffered line keeps at
// most what a fold shows, and the buffers, the seen IDs (kept for
// chatSeenWindow) and the routes each have a byte budget (the oldest go
// first, the seen IDs with a warning).

// turnDone is the argument of SignalTurnDone: a session tells the chat
// workflow that routed a turn how it ended.
type turnDone struct {
	Key       string `json:"key"`
	Completed bool   `json:"completed"`
}

// ChatInput starts (or continues) a chat workflow.
type ChatInput struct {
	Kind string `json:"kind"`
	Chat string `json:"chat"`
	// Scope is the agent the conversation belongs to when several agents
	// are served ("" for the main agent): its sessions are "<scope>/…" and
	// its workflow is ScopedChatWorkflowID's.
	Scope string `json:"scope,omitempty"`
	// State is the conversation's state a run hands to the next when it
	// continues as new: the workflow's own; leave it out.
	State *chatState `json:"state,omitempty"`
	// SignalsPerRun overrides how many signals a run handles before it
	// continues as new (tests).
	SignalsPerRun int `json:"signalsPerRun,omitempty"`
}

// chatState is the chat workflow's durable state, carried across
// continue-as-new. Every list is bounded.
type chatState struct {
	// Seen holds recent message and delivery IDs, oldest first.
	Seen []string `json:"seen,omitempty"`
	// SeenAt holds when each ID of Seen was seen (Unix seconds), in step
	// with it; an ID is kept for chatSeenWindow.
	SeenAt []int64 `json:"seenAt,omitempty"`
	// Owned holds the thread roots the bot owns, oldest first.
	Owned []string `json:"owned,omitempty"`
	// Buffers holds un-summoned discussion per place ("" = top level,
	// else a thread root).
	Buffers []chatBuffer `json:"buffers,omitempty"`
	// Routed counts the turns routed so far.
	Routed int `json:"routed,omitempty"`
	// Routes holds the last turns routed, oldest first, so a deletion of
	// their message can drop them while they wait.
	Routes []chatRoute `json:"routes,omitempty"`
	// Fresh holds the places that started a fresh session (/new), oldest
	// first: a session name and how many times it was renewed.
	Fresh []chatFresh `json:"fresh,omitempty"`
}

// chatFresh is a session name renewed N times by /new: the place's turns
// run in "<session>~<N>".
type chatFresh struct {
	Session string `json:"session"`
	N       int    `json:"n"`
}

// chatRoute is one routed turn: its message, session, key and reply target.
type chatRoute struct {
	ID      string            `json:"id"`
	Session string            `json:"session"`
	Key     string            `json:"key"`
	Reply   *wire.ReplyTarget `json:"reply,omitempty"`
}

// chatBuffer is one place's buffered discussion.
type chatBuffer struct {
	Place    string         `json:"place"`
	Messages []bufferedLine `json:"messages"`
}

// bufferedLine is one buffered message; Turn is set while a routed turn
// has folded it (it is dropped when that turn completes).
type bufferedLine struct {
	ID          string            `json:"id"`
	User        string            `json:"user,omitempty"`
	Text        string            `json:"text,omitempty"`
	Attachments []wire.Attachment `json:"attachments,omitempty"`
	Turn        string            `json:"turn,omitempty"`
}

// Bounds of a chat workflow's state and run.
const (
	// chatSeenWindow is how long a seen message or delivery ID is kept,
	// longer than every platform's redelivery window: Slack retries for
	// about 5 minutes, Feishu/Lark for about 7 hours (15 s, 5 min, 1 h,
	// 6 h), Telegram keeps an undelivered update for 24 hours.
	chatSeenWindow     = 25 * time.Hour
	chatOwnedLimit     = 2000
	chatRoutesLimit    = 100
	chatPlacesLimit    = 200
	chatBufferLimit    = 50
	chatSignalsPerRun  = 1000
	chatRouteTimeout   = 30 * time.Second
	chatFoldTextLimit  = 2000
	chatFoldTotalLimit = 16000
	// Byte budgets of the state, encoded: together well under Temporal's
	// 2 MB payload limit. Past chatSeenBytes the oldest seen IDs go first,
	// whatever their age, with a warning.
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
	st    chatState
	seen  map[string]bool
	owned map[string]bool
	// seenBytes is what Seen weighs (see idBytes).
	seenBytes int
}

// ChatWorkflow is the long-lived workflow of one platform conversation. It
// receives the messages of its channel's door (the signal "message") and
// the word of the sessions it routed turns to ("turn-done"),
// decides for each message whether it is a turn, buffered context or
// nothing, and routes turns to their session workflows. Only fastagent's
// chat doors start and signal it.
func ChatWorkflow(ctx workflow.Context, in ChatInput) error {
	c := &chat{in: in, seen: map[string]bool{}, owned: map[string]bool{}}
	if in.State != nil {
		c.st = *in.State
	}
	if len(c.st.SeenAt) != len(c.st.Seen) {
		// Out of step (not a state this workflow wrote): its IDs count as
		// seen now.
		now := workflow.Now(ctx).Unix()
		c.st.SeenAt = make([]int64, len(c.st.Seen))
		for i := range c.st.SeenAt {
			c.st.SeenAt[i] = now
		}
	}
	for _, id := range c.st.Seen {
		c.seen[id] = true
		c.seenBytes += c.idBytes(id)
	}
	for _, id := range c.st.Owned {
		c.owned[id] = true
	}
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (chatState, error) { return c.st, nil }); err != nil {
		return fmt.Errorf("register %s: %w", QueryState, err)
	}
	msgs := workflow.GetSignalChannel(ctx, wire.SignalChatMessage)
	done := workflow.GetSignalChannel(ctx, wire.SignalTurnDone)
	upgrade := workflow.GetSignalChannel(ctx, SignalUpgrade)
	handled := 0
	for {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(msgs, func(ch workflow.ReceiveChannel, _ bool) {
			var m wire.ChatMessage
			ch.Receive(ctx, &m)
			c.onMessage(ctx, m)
		})
		sel.AddReceive(done, func(ch workflow.ReceiveChannel, _ bool) {
			var d turnDone
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
				var m wire.ChatMessage
				if msgs.ReceiveAsync(&m) {
					c.onMessage(ctx, m)
					continue
				}
				var d turnDone
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
func (c *chat) onMessage(ctx workflow.Context, m wire.ChatMessage) {
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
func (c *chat) admit(ctx workflow.Context, m wire.ChatMessage) bool {
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
	if m.Stop || m.Command != "" {
		if !m.Stop && !c.addressed(m) {
			return false // a command to nobody (group chatter): neither a turn nor context
		}
		// Chat commands (/stop, /new, /status, /help) answer in the
		// chat; runs that took a Telegram /stop before them stop only.
		if workflow.GetVersion(ctx, changeChatCommands, workflow.DefaultVersion, 1) >= 1 {
			c.command(ctx, m)
		} else if m.Stop {
			c.stop(ctx, m)
		}
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
func (c *chat) placeTurn(m wire.ChatMessage) (turnPlace, bool) {
	p := m.Policy
	sessionOf := func(root string) string {
		if m.UniqueIDs && root != "" {
			return c.fresh(ScopedSession(c.in.Scope, m.Kind+":"+root))
		}
		return c.fresh(ScopedSession(c.in.Scope, ChatSession(m.Kind, m.Chat, root)))
	}
	switch {
	case m.Direct:
		if p.DirectSession == wire.SessionContinuous {
			return turnPlace{session: sessionOf(""), thread: m.Root}, true
		}
		root := m.Root
		if root == "" {
			root = m.ID
		}
		return turnPlace{session: sessionOf(root), thread: root}, true
	case m.Summoned || (p.GroupMode == wire.GroupContext && m.Root != "" && c.owned[m.Root] && !m.MentionsOthers):
		switch {
		case p.GroupSession == wire.SessionContinuous:
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
	case p.GroupMode == wire.GroupContext:
		c.buffer(m)
	}
	return turnPlace{}, false
}

// routeMessage makes m a turn at to: it folds the place's buffered
// discussion into the prompt, routes the delivery to the session and
// records the route. A turn that cannot be routed releases what it folded.
func (c *chat) routeMessage(ctx workflow.Context, m wire.ChatMessage, to turnPlace) {
	log := workflow.GetLogger(ctx)
	d, folded, err := c.delivery(m, to)
	if err != nil {
		log.Error("chat: reply target", "error", err)
		return
	}
	if folded > 0 {
		d.Notify = ScopedChatWorkflowID(c.in.Scope, c.in.Kind, c.in.Chat)
	}
	if err := c.route(ctx, wire.RouteInput{Session: to.session, Delivery: d}); err != nil {
		// The session could not be reached even after retries: release
		// the folded lines for the next turn.
		log.Error("chat: route failed", "session", to.session, "key", d.Key, "error", err)
		c.onTurnDone(turnDone{Key: d.Key})
		return
	}
	c.st.Routed++
	c.st.Routes = append(c.st.Routes, chatRoute{ID: m.ID, Session: to.session, Key: d.Key, Reply: d.Reply})
	if n := len(c.st.Routes) - chatRoutesLimit; n > 0 {
		c.st.Routes = append([]chatRoute(nil), c.st.Routes[n:]...)
	}
	// The newest route always stays (its deletion can still drop it).
	size := func(r chatRoute) int {
		n := jsonLen(r.ID) + jsonLen(r.Session) + jsonLen(r.Key) + 64
		if r.Reply != nil {
			// Data is JSON the workflow encoded: it weighs what it is.
			n += jsonLen(r.Reply.Kind) + len(r.Reply.Data)
		}
		return n
	}
	total, keep := 0, len(c.st.Routes)
	for keep > 0 && (keep == len(c.st.Routes) || total+size(c.st.Routes[keep-1]) <= chatRoutesBytes) {
		total += size(c.st.Routes[keep-1])
		keep--
	}
	if keep > 0 {
		c.st.Routes = append([]chatRoute(nil), c.st.Routes[keep:]...)
	}
}

// delivery is m's turn as its session receives it: its key, the prompt
// with the place's buffered discussion folded in (folded counts the lines)
// and the reply target.
func (c *chat) delivery(m wire.ChatMessage, to turnPlace) (d wire.Delivery, folded int, err error) {
	key := ChatTurnKey(m.Kind, m.Chat, m.ID)
	if m.UniqueIDs {
		key = m.Kind + ":" + m.ID
	}
	prompt, folded, background := c.fold(to.place, key, m)
	if m.Direct {
		folded = 0
	}
	// A struct without maps encodes the same bytes every time.
	//workflowcheck:ignore
	target, err := json.Marshal(wire.Target{Chat: m.Chat, Thread: to.thread, Message: m.ID, User: m.User,
		Attachments: m.Attachments, Background: background, Data: m.Data})
	if err != nil {
		return wire.Delivery{}, 0, err
	}
	return wire.Delivery{Key: key, Source: m.Kind, Prompt: prompt, Reply: &wire.ReplyTarget{Kind: m.Kind, Data: target},
		WhileBusy: m.Policy.WhileBusy}, folded, nil
}

// edited handles an edit of message m.ID: it never starts or re-runs a
// turn; the message's buffered line, while not yet folded into a turn,
// takes the new text and files. A redelivered edit is deduplicated by its
// delivery ID.
func (c *chat) edited(ctx workflow.Context, m wire.ChatMessage) {
	if m.Event != "" && c.seen["event:"+m.Event] {
		return
	}
	if m.Event != "" {
		c.see(ctx, "event:"+m.Event)
	}
	for bi := range c.st.Buffers {
		for li := range c.st.Buffers[bi].Messages {
			if l := &c.st.Buffers[bi].Messages[li]; l.ID == m.ID && l.Turn == "" {
				l.Text, l.Attachments = m.Text, m.Attachments
				clipLine(l)
			}
		}
	}
	c.trimBuffers()
}

// deleted handles the deletion (recall) of message m.ID: a buffered line
// not yet folded into a turn is removed; a turn the message started is
// dropped by Chat.Drop if it still waits in its session's queue (a running
// or answered turn is left as it is); a later delivery of the message is
// not a turn. A redelivered deletion does nothing.
func (c *chat) deleted(ctx workflow.Context, m wire.ChatMessage) {
	mark := "deleted:" + m.ID
	if c.seen[mark] || (m.Event != "" && c.seen["event:"+m.Event]) {
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
		in := wire.DropInput{Session: r.Session, Turn: r.Key, Reply: r.Reply, Reason: "its message was deleted before the turn started"}
		if err := workflow.ExecuteLocalActivity(lctx, ActivityChatDrop, in).Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("chat: drop of a deleted message's turn failed", "session", r.Session, "turn", r.Key, "error", err)
		}
		return
	}
}

// route hands a turn to its session: a regular activity retried without a
// total limit (only a non-retryable error ends it), so a message the door
// acknowledged is routed however long Temporal is throttled or restarting,
// and survives a worker restart.
func (c *chat) route(ctx workflow.Context, in wire.RouteInput) error {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: chatRouteTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 30 * time.Second},
		Summary:             "route · turn " + in.Delivery.Key,
	})
	return workflow.ExecuteActivity(actx, ActivityChatRoute, in).Get(ctx, nil)
}

// changeChatCommands versions the chat commands: a stop message
// (ChatMessage.Stop) runs Chat.Command, which answers in the chat, instead
// of Chat.Stop, and /new, /status and /help are handled.
const changeChatCommands = "chat-commands"

// chatFreshLimit bounds chatState.Fresh (the oldest go first).
const chatFreshLimit = 500

// fresh is the session a place named session uses now: itself, or its
// renewal "<session>~<n>" after /new.
func (c *chat) fresh(session string) string {
	for _, f := range c.st.Fresh {
		if f.Session == session && f.N > 0 {
			return session + "~" + strconv.Itoa(f.N)
		}
	}
	return session
}

// renew makes the place named session use a fresh session from now on.
func (c *chat) renew(session string) {
	for i := range c.st.Fresh {
		if c.st.Fresh[i].Session == session {
			f := c.st.Fresh[i]
			f.N++
			// Most recently renewed last: the oldest go first.
			c.st.Fresh = append(append(c.st.Fresh[:i:i], c.st.Fresh[i+1:]...), f)
			return
		}
	}
	c.st.Fresh = append(c.st.Fresh, chatFresh{Session: session, N: 1})
	if n := len(c.st.Fresh) - chatFreshLimit; n > 0 {
		c.st.Fresh = append([]chatFresh(nil), c.st.Fresh[n:]...)
	}
}

// addressed reports whether m speaks to the bot: a direct message, a
// summons, or (context mode) a bare reply in a thread the bot owns.
func (c *chat) addressed(m wire.ChatMessage) bool {
	return m.Direct || m.Summoned || (m.Policy.GroupMode == wire.GroupContext && m.Root != "" && c.owned[m.Root] && !m.MentionsOthers)
}

// placeSession is the session a command m is about, before renewals: the
// conversation's continuous session, or its thread's; "" for a top-level
// message where each one starts a session of its own.
func (c *chat) placeSession(m wire.ChatMessage) string {
	p := m.Policy
	continuous := (m.Direct && p.DirectSession == wire.SessionContinuous) || (!m.Direct && p.GroupSession == wire.SessionContinuous)
	var session string
	switch {
	case continuous:
		session = ChatSession(m.Kind, m.Chat, "")
	case m.Root != "" && m.UniqueIDs:
		session = m.Kind + ":" + m.Root
	case m.Root != "":
		session = ChatSession(m.Kind, m.Chat, m.Root)
	default:
		return ""
	}
	return ScopedSession(c.in.Scope, session)
}

// command runs chat command m (a Telegram /stop without Command is
// /stop) with Chat.Command, which answers where it was sent: /stop aborts
// the running turn of its place's session (a second one finds nothing
// running and says so), /new makes the place start a fresh session from
// now on, /status and /help answer.
func (c *chat) command(ctx workflow.Context, m wire.ChatMessage) {
	cmd := m.Command
	if cmd == "" {
		cmd = wire.CommandStop
	}
	key := ChatTurnKey(m.Kind, m.Chat, m.ID)
	if m.UniqueIDs {
		key = m.Kind + ":" + m.ID
	}
	in := wire.CommandInput{Command: cmd, Key: key, Reason: "stopped by " + displayUser(m.UserName) + " in the chat"}
	if cmd == wire.CommandStop && m.StopTurn != "" {
		in.Turn = ChatTurnKey(m.Kind, m.Chat, m.StopTurn)
		if m.UniqueIDs {
			in.Turn = m.Kind + ":" + m.StopTurn
		}
	}
	if base := c.placeSession(m); base != "" {
		in.Session = c.fresh(base)
		if cmd == wire.CommandNew {
			c.renew(base)
			in.Fresh = c.fresh(base)
		}
	}
	if cmd == wire.CommandStop && m.StopTurn != "" {
		// A stop button names its turn's message: the session that turn
		// was routed to is the one to stop, whatever the click's place
		// says (a renewed place, a platform whose click cannot tell a
		// direct chat from a group).
		if s := c.routedSession(m.StopTurn); s != "" && s != in.Session &&
			workflow.GetVersion(ctx, changeStopRoute, workflow.DefaultVersion, 1) >= 1 {
			in.Session = s
		}
	}
	// A struct without maps encodes the same bytes every time.
	//workflowcheck:ignore
	answerTo := m.ID
	if m.StopTurn != "" {
		answerTo = m.StopTurn // a button's click is no message: answer the turn's
	}
	// A struct without maps encodes the same bytes every time.
	//workflowcheck:ignore
	target, err := json.Marshal(wire.Target{Chat: m.Chat, Thread: m.Root, Message: answerTo, User: m.User, Data: m.Data})
	if err == nil {
		in.Reply = &wire.ReplyTarget{Kind: m.Kind, Data: target}
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: chatRouteTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
		Summary:             "/" + cmd,
	})
	if err := workflow.ExecuteLocalActivity(lctx, ActivityChatCommand, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("chat: command failed", "command", cmd, "session", in.Session, "error", err)
	}
}

// changeStopRoute: a stop button's command acts on the session its turn
// was routed to (chat.routedSession) rather than the click's place.
const changeStopRoute = "stop-route"

// routedSession is the session message id's turn was routed to ("" when
// it is no longer, or never was, among the routes kept).
func (c *chat) routedSession(id string) string {
	for i := len(c.st.Routes) - 1; i >= 0; i-- {
		if c.st.Routes[i].ID == id {
			return c.st.Routes[i].Session
		}
	}
	return ""
}

// stop aborts the running turn of the session m would be routed to (the
// conversation's continuous session, or its thread's session).
func (c *chat) stop(ctx workflow.Context, m wire.ChatMessage) {
	p := m.Policy
	continuous := (m.Direct && p.DirectSession == wire.SessionContinuous) || (!m.Direct && p.GroupSession == wire.SessionContinuous)
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
	in := wire.StopInput{Session: session, Reason: "stopped by " + displayUser(m.UserName) + " in the chat", Key: key}
	if err := workflow.ExecuteLocalActivity(lctx, ActivityChatStop, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("chat: stop failed", "session", session, "error", err)
	}
}

// fold prefixes the message with its place's buffered discussion not yet
// folded into another turn, and marks those lines as folded by key. It
// returns the folded lines' files too.
func (c *chat) fold(place, key string, m wire.ChatMessage) (agent.Prompt, int, []wire.Attachment) {
	prompt := agent.Prompt{Text: m.Text}
	b := c.bufferOf(place, false)
	if b == nil {
		return prompt, 0, nil
	}
	var files []wire.Attachment
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
func (c *chat) onTurnDone(d turnDone) {
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

func (c *chat) buffer(m wire.ChatMessage) {
	b := c.bufferOf(m.Root, true)
	name := m.UserName
	if name == "" {
		name = m.User
	}
	line := bufferedLine{ID: m.ID, User: name, Text: m.Text, Attachments: m.Attachments}
	clipLine(&line)
	b.Messages = append(b.Messages, line)
	if n := len(b.Messages) - chatBufferLimit; n > 0 {
		b.Messages = append([]bufferedLine(nil), b.Messages[n:]...)
	}
	c.trimBuffers()
}

// clipLine keeps of a buffered line what a fold shows: chatFoldTextLimit
// bytes of its text and a rune more (so it still knows the line was
// longer), a short name, the first chatLineFiles files.
func clipLine(l *bufferedLine) {
	l.Text = clipUTF8(l.Text, chatFoldTextLimit+utf8.UTFMax)
	l.User = clipUTF8(l.User, 256)
	if len(l.Attachments) > chatLineFiles {
		l.Attachments = l.Attachments[:chatLineFiles]
	}
}

// lineBytes is what a buffered line weighs in the state, encoded.
func (c *chat) lineBytes(l bufferedLine) int {
	n := jsonLen(l.ID) + jsonLen(l.User) + jsonLen(l.Text) + jsonLen(l.Turn) + 56
	for _, a := range l.Attachments {
		n += jsonLen(a.ID) + jsonLen(a.Name) + jsonLen(a.Mime) + 56
	}
	return n
}

// idBytes is what a seen ID weighs in the state, encoded (its SeenAt time
// included).
func (c *chat) idBytes(id string) int {
	return jsonLen(id) + chatSeenOverhead
}

// trimBuffers drops the oldest buffered lines, across places, until the
// buffers fit chatBufferBytes.
func (c *chat) trimBuffers() {
	total := 0
	for _, b := range c.st.Buffers {
		for _, l := range b.Messages {
			total += c.lineBytes(l)
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
		total -= c.lineBytes(b.Messages[0])
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

func (c *chat) bufferOf(place string, create bool) *chatBuffer {
	for i := range c.st.Buffers {
		if c.st.Buffers[i].Place == place {
			return &c.st.Buffers[i]
		}
	}
	if !create {
		return nil
	}
	if len(c.st.Buffers) >= chatPlacesLimit {
		c.st.Buffers = append([]chatBuffer(nil), c.st.Buffers[1:]...)
	}
	c.st.Buffers = append(c.st.Buffers, chatBuffer{Place: place})
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
	c.seenBytes += c.idBytes(id)
	// Kept by time: drop what is older than the window, and past the byte
	// budget the oldest whatever their age.
	now := workflow.Now(ctx)
	c.st.SeenAt = append(c.st.SeenAt, now.Unix())
	horizon := now.Add(-chatSeenWindow).Unix()
	n, bytes := 0, c.seenBytes
	for n < len(c.st.SeenAt) && (c.st.SeenAt[n] < horizon || bytes > chatSeenBytes) {
		bytes -= c.idBytes(c.st.Seen[n])
		n++
	}
	c.seenBytes = bytes
	if n > 0 {
		if c.st.SeenAt[n-1] >= horizon {
			workflow.GetLogger(ctx).Warn("chat: more IDs seen within the dedup window than kept; the oldest are forgotten early",
				"keptBytes", chatSeenBytes, "window", chatSeenWindow.String())
		}
		for _, old := range c.st.Seen[:n] {
			delete(c.seen, old)
		}
		c.st.Seen = append([]string(nil), c.st.Seen[n:]...)
		c.st.SeenAt = append([]int64(nil), c.st.SeenAt[n:]...)
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
