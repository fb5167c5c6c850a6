package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// Slack's limits and answers the renderer depends on.
const (
	// markdownLimit is the most characters one markdown_text takes
	// (chat.startStream, chat.appendStream, chat.stopStream, chat.update).
	markdownLimit = 12000
	// textLimit is about the most characters chat.postMessage and
	// chat.update take in text.
	textLimit = 40000
	// errNotStreaming answers an append to (or stop of) a stream that is
	// no longer open.
	errNotStreaming = "message_not_in_streaming_state"
)

// Ref prefixes: a stored reference says which kind of message it names, so
// a renderer resumed in another process continues it the same way. A bare
// "<ts>" (rows written before streaming) is a message.
const (
	refStream  = "stream:"
	refMessage = "msg:"
	// refControl separates a stream's ts from the ts of the message
	// holding its Stop button: "stream:<ts>+<control ts>".
	refControl = "+"
)

// ThinkingStatus is the assistant thread status shown before the first text.
const ThinkingStatus = "is thinking…"

// ReplyEventType is the metadata event type every reply message carries;
// its payload's "turn" is the turn's key. A renderer that has no stored
// reference looks for it before posting, so a post whose reference was
// lost (a crash, a timed-out call Slack carried out) is not posted twice.
const ReplyEventType = "fastagent_reply"

// HTTPTimeout bounds one Web API call: well inside the live reply's
// heartbeat timeout (15 s) and the final reply's attempt (1 min), so a
// hung call fails its attempt instead of outliving it while a retry posts
// again.
var HTTPTimeout = 10 * time.Second

// searchPages bounds the pages of a thread (200 messages each) searched
// for a marked reply.
const searchPages = 5

// truncNote ends an answer cut to fit one Slack message.
const truncNote = "\n\n_(The answer was cut here: it is longer than one Slack message can hold.)_"

// Replier renders answers with the Web API.
type Replier struct {
	api   *slack.Client
	token string
	// apiURL is the parsed API URL override (nil for Slack's).
	apiURL *url.URL
	// Files bounds file downloads and uploads.
	Files FileLimits
	// Transport carries file downloads (nil: http.DefaultTransport).
	Transport http.RoundTripper
	// EditEvery is the least interval between two edits of one message
	// (Slack's chat.update is Tier 3); default 3 s.
	EditEvery time.Duration
	// AppendEvery is the least interval between two text appends to a
	// native stream (tool status changes go at once); default 1 s.
	AppendEvery time.Duration
	// DetailsEvery is the least interval between two updates of a stream
	// that only change a running tool's details (its progress line); the
	// latest line wins. Default 3 s.
	DetailsEvery time.Duration
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
	// Logger logs ignored failures (assistant status, stream refusals);
	// nil is slog.Default().
	Logger *slog.Logger
	// names caches the channel IDs of the names Deliver looked up.
	names sync.Map
	// noStatus holds the workspaces (team IDs) whose app Slack does not
	// let set assistant statuses.
	noStatus sync.Map
}

// NewReplier returns a replier with token; apiURL ("" = Slack's) overrides
// the Web API base URL.
func NewReplier(token, apiURL string) *Replier {
	r := &Replier{token: token, EditEvery: 3 * time.Second, AppendEvery: time.Second, DetailsEvery: 3 * time.Second}
	opts := []slack.Option{slack.OptionHTTPClient(&http.Client{Timeout: HTTPTimeout})}
	if apiURL != "" {
		base := strings.TrimSuffix(apiURL, "/") + "/"
		opts = append(opts, slack.OptionAPIURL(base))
		if u, err := url.Parse(base); err == nil {
			r.apiURL = u
		}
	}
	r.api = slack.New(token, opts...)
	return r
}

// Kind implements channels.Replier.
func (r *Replier) Kind() string { return Kind }

// Render implements channels.Replier. A reply under a thread is a native
// Slack stream (chat.startStream/appendStream/stopStream) with tool calls
// as task updates and the assistant status "is thinking…" until the first
// text; a top-level reply, or one whose stream Slack refuses, is one
// message edited at most every EditEvery. ref is a reference an earlier
// renderer stored; the reply continues that message, never posts another.
func (r *Replier) Render(_ context.Context, t wire.Target, ref string) (channels.Render, error) {
	_, channel, ok := strings.Cut(t.Chat, ":")
	if !ok || channel == "" {
		return nil, fmt.Errorf("slack: reply target chat %q: want <team>:<channel>", t.Chat)
	}
	var d targetData
	if len(t.Data) > 0 {
		if err := json.Unmarshal(t.Data, &d); err != nil {
			return nil, fmt.Errorf("slack: reply target data: %w", err)
		}
	}
	m := &render{r: r, channel: channel, thread: t.Thread, team: d.Team, user: t.User, tasks: map[string]string{},
		turn: t.Turn, after: t.Message, button: stopButton(d.Team, t.Thread, t.Message, t.User), statusShown: statusUnknown}
	switch {
	case ref == "":
	case strings.HasPrefix(ref, refStream):
		// What a resumed stream shows is unknown: open is set so the
		// next call finds out from Slack, known stays false.
		m.mode, m.open = modeStream, true
		m.ts, m.control, _ = strings.Cut(strings.TrimPrefix(ref, refStream), refControl)
	case strings.HasPrefix(ref, refMessage):
		m.mode, m.ts = modeMessage, strings.TrimPrefix(ref, refMessage)
	case !strings.Contains(ref, ":"):
		m.mode, m.ts = modeMessage, ref
	default:
		return nil, fmt.Errorf("slack: reply reference %q: want stream:<ts>, msg:<ts> or <ts>", ref)
	}
	if m.mode != modeNone && m.ts == "" {
		return nil, fmt.Errorf("slack: reply reference %q has no timestamp", ref)
	}
	return m, nil
}

// mode is what a reply is on Slack.
type mode int

const (
	modeNone    mode = iota // nothing posted yet
	modeStream              // a native stream (open or stopped)
	modeMessage             // a message posted with chat.postMessage
)

// render is one turn's reply. Its fields are used by one goroutine at a
// time (the activity that owns it).
type render struct {
	r                           *Replier
	channel, thread, team, user string
	// turn marks the reply's messages (metadata); after is the answered
	// message, before which no reply to it can be.
	turn, after string
	// searched is set once the conversation was searched for a marked
	// reply.
	searched bool

	mode mode
	ts   string
	// open is set while the stream may still be open.
	open bool
	// known is set when this renderer started the stream, so appended is
	// exactly what it shows; a resumed stream is not known.
	known bool
	// appended is the markdown this renderer streamed.
	appended string
	// shrunk is set when the view's text stopped extending appended (a
	// retried step); text appends stop and Finish settles the message.
	shrunk bool
	// tasks is the status and progress line sent per tool call ID;
	// detailsAt is when an update that only changed details was last sent.
	tasks     map[string]string
	detailsAt time.Time
	// refused is set when Slack refused to start a stream.
	refused bool
	// statusShown is the assistant status last sent (statusUnknown before
	// any); statusOff is set when Slack refused this thread's status.
	statusShown string
	statusOff   bool
	// shown is the text the message was last set to by an edit or post
	// ("" when unknown); shownAt is when; sentAt is the last append.
	shown           string
	shownAt, sentAt time.Time
	// wait is when a rate limit lets the next live update go.
	wait time.Time
	// button is the Stop button of the turn (nil: none). A message reply
	// carries it while the turn runs; a stream cannot hold one (Slack
	// takes no blocks while streaming), so it goes in a small message of
	// its own under the stream: control, deleted when the turn ends.
	button slack.Block
	// buttoned is set once this renderer showed the button on the
	// message; controlTried once it tried to post the control message.
	buttoned, controlTried bool
	control                string
}

// Ref implements channels.Render: "stream:<ts>" or "msg:<ts>".
func (m *render) Ref() string {
	switch m.mode {
	case modeStream:
		if m.control != "" {
			return refStream + m.ts + refControl + m.control
		}
		return refStream + m.ts
	case modeMessage:
		return refMessage + m.ts
	}
	return ""
}

func (r *Replier) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Show implements channels.Render. Rate limits are honoured by skipping
// updates until Retry-After has passed.
func (m *render) Show(ctx context.Context, v *channels.View) error {
	now := m.r.now()
	if now.Before(m.wait) {
		return nil
	}
	err := m.show(ctx, v, now)
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		m.wait = now.Add(rl.RetryAfter)
	}
	return err
}

func (m *render) show(ctx context.Context, v *channels.View, now time.Time) error {
	text := v.Text()
	m.status(ctx, liveStatus(v))
	switch {
	case m.mode == modeNone && text == "" && (len(v.Tools) == 0 || m.thread == "" || m.refused):
		// Nothing to show yet (a message shows no tools): the model is
		// thinking.
		return nil
	case m.mode == modeNone && m.thread != "" && !m.refused:
		return m.start(ctx, text, v.Tools, now)
	case m.mode == modeStream && m.open && m.known:
		return m.appendView(ctx, text, v.Tools, now)
	case m.mode == modeStream && m.open:
		// A resumed stream: what it shows is unknown, so appending could
		// repeat text. Close it and edit the message instead.
		if text == "" {
			return nil
		}
		if err := m.stop(ctx, ""); err != nil {
			return err
		}
		return m.edit(ctx, text, now)
	default:
		return m.edit(ctx, text, now)
	}
}

// liveStatus is the assistant status of a running turn: the tool that
// runs, else thinking.
func liveStatus(v *channels.View) string {
	var running []string
	for _, t := range v.Tools {
		if t.Status == channels.ToolRunning {
			running = append(running, t.Name)
		}
	}
	if len(running) > 0 {
		return fmt.Sprintf(runningStatus, strings.Join(running, ", "))
	}
	return ThinkingStatus
}

// start opens the native stream with the text and tool updates so far. A
// refusal (ok:false: not_allowed, missing_scope, unknown_method…) falls
// back to one edited message.
func (m *render) start(ctx context.Context, text string, tools []channels.ToolView, now time.Time) error {
	if err := m.adopt(ctx); err != nil {
		return err
	}
	if m.mode != modeNone {
		return m.edit(ctx, text, now)
	}
	head, _ := cutRunes(text, markdownLimit)
	chunks, _ := m.taskChunks(tools, now)
	opts := []slack.MsgOption{slack.MsgOptionTS(m.thread)}
	if m.team != "" {
		opts = append(opts, slack.MsgOptionRecipientTeamID(m.team))
	}
	if m.user != "" {
		opts = append(opts, slack.MsgOptionRecipientUserID(m.user))
	}
	_, ts, err := m.r.api.StartStreamContext(ctx, m.channel, append(opts, content(head, chunks)...)...)
	if err != nil {
		var se slack.SlackErrorResponse
		if !errors.As(err, &se) {
			return fmt.Errorf("slack: chat.startStream: %w", err)
		}
		m.r.log().Info("slack: native stream refused; posting one edited message", "channel", m.channel, "error", se.Err)
		m.refused = true
		return m.edit(ctx, text, now)
	}
	m.mode, m.ts, m.open, m.known, m.appended, m.sentAt = modeStream, ts, true, true, head, now
	m.sent(chunks, now)
	m.postControl(ctx)
	if head != text {
		return m.appendText(ctx, text[len(head):], nil, now)
	}
	return nil
}

// appendView appends the view's new text (at most every AppendEvery) and
// its tool changes (at once) to the open stream this renderer started.
func (m *render) appendView(ctx context.Context, text string, tools []channels.ToolView, now time.Time) error {
	if !m.shrunk && !strings.HasPrefix(text, m.appended) {
		// A retried step took back text the stream already shows.
		m.shrunk = true
	}
	suffix := ""
	if !m.shrunk {
		suffix = text[len(m.appended):]
	}
	chunks, statusChanged := m.taskChunks(tools, now)
	textDue := suffix != "" && now.Sub(m.sentAt) >= m.r.AppendEvery
	if !textDue && !statusChanged && (len(chunks) == 0 || now.Sub(m.detailsAt) < m.r.DetailsEvery) {
		// Nothing due: details-only changes wait for their interval (the
		// latest line goes then).
		return nil
	}
	if !statusChanged && now.Sub(m.detailsAt) < m.r.DetailsEvery {
		chunks = nil // text goes now; the details wait
	}
	if textDue || len(chunks) > 0 {
		m.sentAt = now
	}
	return m.appendText(ctx, suffix, chunks, now)
}

// appendText appends suffix in pieces Slack accepts, chunks with the last.
// A stream Slack says is closed turns into an edited message.
func (m *render) appendText(ctx context.Context, suffix string, chunks []slack.StreamChunk, now time.Time) error {
	for first := true; first || suffix != ""; first = false {
		piece, rest := cutRunes(suffix, markdownLimit)
		var send []slack.StreamChunk
		if rest == "" {
			send = chunks
		}
		if piece == "" && len(send) == 0 {
			return nil
		}
		_, _, err := m.r.api.AppendStreamContext(ctx, m.channel, m.ts, content(piece, send)...)
		if isNotStreaming(err) {
			m.open, m.shown = false, m.appended
			return nil
		}
		if err != nil {
			return fmt.Errorf("slack: chat.appendStream: %w", err)
		}
		m.appended += piece
		m.sent(send, now)
		suffix = rest
	}
	return nil
}

// stop closes the open stream with a last piece of markdown ("" for none);
// a stream Slack already closed is fine.
func (m *render) stop(ctx context.Context, last string) error {
	var opts []slack.MsgOption
	if last != "" {
		opts = append(opts, slack.MsgOptionMarkdownText(last))
	}
	_, _, err := m.r.api.StopStreamContext(ctx, m.channel, m.ts, opts...)
	switch {
	case isNotStreaming(err):
		m.known = false
	case err != nil:
		return fmt.Errorf("slack: chat.stopStream: %w", err)
	default:
		m.appended += last
	}
	m.open = false
	return nil
}

// edit posts text as the reply when none exists, else edits the message
// at most every EditEvery.
func (m *render) edit(ctx context.Context, text string, now time.Time) error {
	if text == "" || text == m.shown {
		return nil
	}
	if m.mode != modeNone && now.Sub(m.shownAt) < m.r.EditEvery {
		return nil
	}
	if err := m.put(ctx, text, true); err != nil {
		return err
	}
	m.shownAt = now
	return nil
}

// postControl posts, once, the message holding the Stop button under the
// stream just started. It is a courtesy: a failure is logged.
func (m *render) postControl(ctx context.Context) {
	if m.button == nil || m.controlTried || m.thread == "" {
		return
	}
	m.controlTried = true
	_, ts, err := m.r.api.PostMessageContext(ctx, m.channel, slack.MsgOptionTS(m.thread),
		slack.MsgOptionText("Stop this turn", false), slack.MsgOptionBlocks(m.button))
	if err != nil {
		m.r.log().Warn("slack: stop button not posted", "channel", m.channel, "thread", m.thread, "error", err)
		return
	}
	m.control = ts
}

// dropControl deletes the Stop button's message once the turn ended; one
// already gone is fine, and a failure is logged (the reply matters more).
func (m *render) dropControl(ctx context.Context) {
	if m.control == "" {
		return
	}
	_, _, err := m.r.api.DeleteMessageContext(ctx, m.channel, m.control)
	if err != nil && !strings.Contains(err.Error(), "message_not_found") {
		m.r.log().Warn("slack: stop button not removed", "channel", m.channel, "ts", m.control, "error", err)
	}
	m.control = ""
}

// Finish implements channels.Render: an open stream is stopped (with the
// rest of text when this renderer streamed a prefix of it), then the
// message is set to exactly text unless it is known to show it; with
// nothing posted, text is posted. A rate limit is waited out, bounded by
// ctx. A text longer than one message holds (about 40,000 characters) is
// cut with a note saying so.
func (m *render) Finish(ctx context.Context, text string) error {
	for {
		err := m.finish(ctx, text)
		var rl *slack.RateLimitedError
		if !errors.As(err, &rl) {
			return err
		}
		t := time.NewTimer(rl.RetryAfter)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

func (m *render) finish(ctx context.Context, text string) error {
	if err := m.settle(ctx, text); err != nil {
		return err
	}
	m.dropControl(ctx)
	if !strings.Contains(m.turn, "#") {
		// A turn's answer ends its status; a command's answer or a busy
		// notice (keys with '#') leaves the running turn's alone.
		m.status(ctx, noStatus)
	}
	return nil
}

func (m *render) settle(ctx context.Context, text string) error {
	if m.mode == modeStream && m.open {
		last := ""
		if m.known && !m.shrunk && strings.HasPrefix(text, m.appended) {
			if rest := text[len(m.appended):]; utf8.RuneCountInString(rest) <= markdownLimit {
				last = rest
			}
		}
		if err := m.stop(ctx, last); err != nil {
			return err
		}
		if m.known && !m.shrunk && m.appended == text {
			m.shown = text
			return nil
		}
		m.shown = ""
	}
	if m.mode != modeNone && m.shown == text && !m.buttoned {
		return nil
	}
	return m.put(ctx, text, false)
}

// put posts text (no message yet) or sets the message to it: as
// markdown_text on a stream's message (as it was streamed), as text
// otherwise. A live message (not a stream's) carries the Stop button;
// the final one loses it.
func (m *render) put(ctx context.Context, text string, live bool) error {
	if err := m.adopt(ctx); err != nil {
		return err
	}
	if m.mode == modeNone {
		opts := []slack.MsgOption{slack.MsgOptionText(fit(text), false)}
		if live && m.button != nil {
			opts = append(opts, slack.MsgOptionBlocks(withButton(fit(text), m.button)...))
		}
		if m.thread != "" {
			opts = append(opts, slack.MsgOptionTS(m.thread))
		}
		if m.turn != "" {
			opts = append(opts, slack.MsgOptionMetadata(slack.SlackMetadata{EventType: ReplyEventType,
				EventPayload: map[string]any{"turn": m.turn}}))
		}
		_, ts, err := m.r.api.PostMessageContext(ctx, m.channel, opts...)
		if err != nil {
			return fmt.Errorf("slack: chat.postMessage: %w", err)
		}
		m.mode, m.ts, m.shown, m.buttoned = modeMessage, ts, text, live && m.button != nil
		return nil
	}
	opts := []slack.MsgOption{slack.MsgOptionText(fit(text), false)}
	switch {
	case m.mode == modeStream && utf8.RuneCountInString(text) <= markdownLimit:
		opts = []slack.MsgOption{slack.MsgOptionMarkdownText(text)}
	case m.mode == modeStream:
	case live && m.button != nil:
		opts = append(opts, slack.MsgOptionBlocks(withButton(fit(text), m.button)...))
	case m.button != nil:
		// The turn ended: blocks=[] removes the Stop button (an update
		// without blocks would keep the message's earlier ones).
		opts = append(opts, slack.MsgOptionBlocks())
	}
	if _, _, _, err := m.r.api.UpdateMessageContext(ctx, m.channel, m.ts, opts...); err != nil {
		return fmt.Errorf("slack: chat.update: %w", err)
	}
	m.shown, m.buttoned = text, live && m.button != nil && m.mode == modeMessage
	return nil
}

// sectionLimit is the most characters one section block's text takes.
const sectionLimit = 3000

// withButton is a live message's blocks: its text in sections (blocks
// replace the text on screen), then the Stop button.
func withButton(text string, button slack.Block) []slack.Block {
	var out []slack.Block
	for rest := text; rest != ""; {
		var head string
		head, rest = cutRunes(rest, sectionLimit)
		if rest != "" {
			// Cut at the last line break of the piece, if it has one late
			// enough, so a line is not split.
			if i := strings.LastIndexByte(head, '\n'); i > len(head)/2 {
				head, rest = head[:i+1], head[i+1:]+rest
			}
		}
		out = append(out, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, head, false, false), nil, nil))
	}
	return append(out, button)
}

// adopt looks, once, for a message marked with the turn when none is
// known: a reply an earlier attempt posted but could not store (or whose
// post timed out after Slack carried it out). A found one is continued
// as an edited message. A search Slack refuses (a missing history scope)
// is logged and the reply posted as before.
func (m *render) adopt(ctx context.Context) error {
	if m.mode != modeNone || m.searched || m.turn == "" {
		return nil
	}
	ts, err := m.find(ctx)
	if err != nil {
		var se slack.SlackErrorResponse
		if !errors.As(err, &se) {
			return fmt.Errorf("slack: search for the reply of %s: %w", m.turn, err)
		}
		m.r.log().Warn("slack: cannot search the conversation for an earlier reply", "channel", m.channel, "turn", m.turn, "error", se.Err)
	}
	m.searched = true
	if ts != "" {
		m.mode, m.ts = modeMessage, ts
		m.r.log().Info("slack: continuing a reply an earlier attempt posted", "channel", m.channel, "turn", m.turn, "ts", ts)
	}
	return nil
}

// find returns the ts of the message marked with the turn in the reply's
// thread (or, at the top level, after the answered message), "" if none.
func (m *render) find(ctx context.Context) (string, error) {
	match := func(msgs []slack.Message) string {
		for _, x := range msgs {
			if x.Metadata.EventType == ReplyEventType && fmt.Sprint(x.Metadata.EventPayload["turn"]) == m.turn {
				return x.Timestamp
			}
		}
		return ""
	}
	cursor := ""
	for page := 0; page < searchPages; page++ {
		var msgs []slack.Message
		var more bool
		var err error
		if m.thread != "" {
			msgs, more, cursor, err = m.r.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
				ChannelID: m.channel, Timestamp: m.thread, Cursor: cursor, Limit: 200, IncludeAllMetadata: true})
		} else {
			var h *slack.GetConversationHistoryResponse
			h, err = m.r.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
				ChannelID: m.channel, Oldest: m.after, Cursor: cursor, Limit: 200, IncludeAllMetadata: true})
			if h != nil {
				msgs, more, cursor = h.Messages, h.HasMore, h.ResponseMetaData.NextCursor
			}
		}
		if err != nil {
			return "", err
		}
		if ts := match(msgs); ts != "" {
			return ts, nil
		}
		if !more || cursor == "" {
			return "", nil
		}
	}
	return "", nil
}

// detailsEscaper keeps a task's details as text: Slack reads &, < and >
// as its own markup (mentions, links, entities).
var detailsEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// taskKey is what a tool's task shows: its status and, while it runs, its
// escaped progress line.
func taskKey(t channels.ToolView) (status, details string) {
	return t.Status, detailsEscaper.Replace(t.ProgressLine())
}

// taskChunks returns task updates for the tools whose task changed since
// the last one sent: the tool's name, status and progress line, never its
// arguments. statusChanged is set when a status changed (such updates go
// at once); otherwise only details changed, and the caller sends them at
// most every DetailsEvery.
func (m *render) taskChunks(tools []channels.ToolView, _ time.Time) (out []slack.StreamChunk, statusChanged bool) {
	for _, t := range tools {
		status, details := taskKey(t)
		sent, seen := m.tasks[t.ID]
		if seen && sent == status+"\x00"+details {
			continue
		}
		if sentStatus, _, _ := strings.Cut(sent, "\x00"); !seen || sentStatus != status {
			statusChanged = true
		}
		c := slack.NewTaskUpdateChunk(t.ID, t.Name)
		c.Details = details
		switch t.Status {
		case channels.ToolDone:
			c.Status = slack.TaskCardStatusComplete
		case channels.ToolError:
			c.Status = slack.TaskCardStatusError
		default:
			c.Status = slack.TaskCardStatusInProgress
		}
		out = append(out, c)
	}
	return out, statusChanged
}

// sent records the task updates Slack accepted at now.
func (m *render) sent(chunks []slack.StreamChunk, now time.Time) {
	for _, c := range chunks {
		if t, ok := c.(slack.TaskUpdateChunk); ok {
			switch t.Status {
			case slack.TaskCardStatusComplete:
				m.tasks[t.ID] = channels.ToolDone + "\x00"
			case slack.TaskCardStatusError:
				m.tasks[t.ID] = channels.ToolError + "\x00"
			default:
				m.tasks[t.ID] = channels.ToolRunning + "\x00" + t.Details
			}
			m.detailsAt = now
		}
	}
}

// content is a stream call's payload: markdown_text alone, or chunks (a
// markdown chunk first) when there are task updates.
func content(text string, chunks []slack.StreamChunk) []slack.MsgOption {
	if len(chunks) == 0 {
		if text == "" {
			return nil
		}
		return []slack.MsgOption{slack.MsgOptionMarkdownText(text)}
	}
	if text != "" {
		chunks = append([]slack.StreamChunk{slack.NewMarkdownTextChunk(text)}, chunks...)
	}
	return []slack.MsgOption{slack.MsgOptionChunks(chunks...)}
}

// isNotStreaming reports Slack's answer for a stream that is closed.
func isNotStreaming(err error) bool {
	var se slack.SlackErrorResponse
	return errors.As(err, &se) && se.Err == errNotStreaming
}

// cutRunes splits s after at most n characters.
func cutRunes(s string, n int) (head, tail string) {
	if len(s) <= n {
		return s, ""
	}
	i := 0
	for k := range s {
		if i == n {
			return s[:k], s[k:]
		}
		i++
	}
	return s, ""
}

// fit cuts text to what one message holds, ending it with a note.
func fit(text string) string {
	if utf8.RuneCountInString(text) <= textLimit {
		return text
	}
	head, _ := cutRunes(text, textLimit-utf8.RuneCountInString(truncNote))
	return head + truncNote
}

func (r *Replier) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

// Reactions of React: :eyes: once a message is taken, :white_check_mark:
// once answered.
const (
	ReactionTaken    = "eyes"
	ReactionAnswered = "white_check_mark"
)

// React implements channels.Reactor with reactions.add; a reaction the
// bot already added (a retry) is not an error.
func (r *Replier) React(ctx context.Context, t wire.Target, stage string) error {
	channel, err := channelOf(t)
	if err != nil || t.Message == "" {
		return fmt.Errorf("slack: react: no message to react to (%q in %q)", t.Message, t.Chat)
	}
	name := ReactionTaken
	if stage == channels.ReactAnswered {
		name = ReactionAnswered
	} else if t.Thread != "" {
		// The turn starts: its thread's assistant status says so.
		var d targetData
		_ = json.Unmarshal(t.Data, &d)
		r.sendStatus(ctx, d.Team, channel, t.Thread, ThinkingStatus)
	}
	err = r.api.AddReactionContext(ctx, name, slack.ItemRef{Channel: channel, Timestamp: t.Message})
	if err != nil && strings.Contains(err.Error(), "already_reacted") {
		return nil
	}
	return err
}
