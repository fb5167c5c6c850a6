package wire

import "encoding/json"

// The chat channels' protocol: a door turns a platform event into a
// ChatMessage and signals it (SignalChatMessage) to the conversation's
// chat workflow, which routes turns to their sessions (Chat.Route) and
// drops or stops them (Chat.Drop, Chat.Stop).

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
	// WhileBusy is what a message does when its session is busy
	// (workflows.WhileBusyQueue, the default, steer, interrupt, reject):
	// the channel file's whileBusy, else fastagent.yaml's
	// conversation.whileBusy.
	WhileBusy string `json:"whileBusy,omitempty"`
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
	// Command is a chat command the message is instead of a turn, handled
	// before any model sees it: CommandStop, CommandNew, CommandStatus or
	// CommandHelp ("": none).
	Command string `json:"command,omitempty"`
	// StopTurn is the message (ID) whose turn a stop button on its reply
	// stops (Command is CommandStop): only that turn, running or waiting.
	StopTurn string `json:"stopTurn,omitempty"`
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

// RouteInput is the argument of ActivityChatRoute: hand Delivery to the
// session workflow of Session with Signal-With-Start (the deliver signal).
type RouteInput struct {
	Session  string   `json:"session"`
	Delivery Delivery `json:"delivery"`
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

// Chat commands (ChatMessage.Command): a message that is exactly one of
// them, addressed to the bot, is handled by the chat workflow and never
// reaches a model.
const (
	// CommandStop aborts the running turn of the message's session.
	CommandStop = "stop"
	// CommandNew makes the message's thread or chat start a fresh session
	// from now on: earlier messages are no longer in the agent's context.
	CommandNew = "new"
	// CommandStatus answers with the session's running turn, queue and
	// usage.
	CommandStatus = "status"
	// CommandHelp lists the commands.
	CommandHelp = "help"
)

// CommandInput is the argument of ActivityChatCommand: run a chat command
// for Session and answer it where the command was sent.
type CommandInput struct {
	Command string `json:"command"`
	// Session is the session the command is about ("": the place has none,
	// e.g. a top-level message where each one starts its own).
	Session string `json:"session,omitempty"`
	// Key is the command message's turn key: the stop's abort update ID
	// and the notice's reply reference derive from it, so a retried
	// command does its work and posts its answer once.
	Key    string `json:"key"`
	Reason string `json:"reason,omitempty"`
	// Reply is where the command's answer goes.
	Reply *ReplyTarget `json:"reply,omitempty"`
	// Fresh is the session the place uses from now on (CommandNew).
	Fresh string `json:"fresh,omitempty"`
	// Turn, for a stop button, is the key of the turn it stops (only that
	// one, while it runs or waits); "": the running turn.
	Turn string `json:"turn,omitempty"`
}

// Notices a session posts for a delivered chat command (ReplyInput.Notice).
const (
	// NoticeNothingRunning answers a stop that found nothing running.
	NoticeNothingRunning = "nothing-running"
	// NoticeNew answers /new: the session's context starts afresh.
	NoticeNew = "new"
	// NoticeNewBusy answers /new while a turn runs or waits.
	NoticeNewBusy = "new-busy"
	// NoticeStatus answers /status with the session's state.
	NoticeStatus = "status"
	// NoticeHelp answers /help.
	NoticeHelp = "help"
)
