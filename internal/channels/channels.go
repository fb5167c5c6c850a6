// Package channels is the framework every chat or webhook channel (Slack,
// Feishu/Lark, GitHub, Telegram) is built on. A channel is two small parts:
//
//   - a Door, which verifies a webhook request on its capped raw body before
//     parsing anything, and parses it into deliveries plus the immediate HTTP
//     answer;
//   - a Replier, which posts (or updates) the final answer of a turn.
//
// The door's handler (Handler) — or a long connection (Connector) — hands
// each message durably to Temporal with Signal-With-Start on its
// conversation's chat workflow (workflows.ChatWorkflow: dedup, owned roots,
// buffered context, routing to sessions) and answers at once: it never
// waits for a worker or a model. Queueing and the reply happen in the
// session workflow (workflows.ActivityChannelStream while the turn runs,
// workflows.ActivityChannelReply after it), so they are exactly-once across
// retries and restarts. Channels are enabled by files channels/<kind>.yaml
// of the agent dir; a kind registers its factory with Register.
package channels

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/internal/workspace"
	"github.com/fastagent/fastagent/workflows"
)

// Delivery is a turn a door maps directly to a session, without a chat
// workflow: webhook channels whose policy names the session itself (GitHub).
type Delivery struct {
	// Kind is the channel kind ("github").
	Kind string
	// ID is the platform's identity of the delivery; it deduplicates
	// redeliveries.
	ID string
	// Session is the session the turn runs in.
	Session string
	Prompt  agent.Prompt
	// Answer is the person's own words when Prompt wraps them (a rule's
	// template): what answers a question the agent is waiting on.
	Answer string
	// Reply is where the answer goes (nil: nowhere).
	Reply *wire.Target
	// WhileBusy is what the turn does while its session is busy
	// (workflows.WhileBusyQueue, "" too, steer, interrupt, reject).
	WhileBusy string
	// Command is the chat command (wire.CommandStop…) the delivery is
	// instead of a turn; the session runs and answers it.
	Command string
}

// Key is the turn's idempotency key: "<kind>:<ID>".
func (d Delivery) Key() string { return d.Kind + ":" + d.ID }

// Parsed is what a door made of one verified request: chat messages for
// their conversations' chat workflows, direct deliveries for sessions, and
// the immediate answer.
type Parsed struct {
	Messages   []wire.ChatMessage
	Deliveries []Delivery
	// Decisions are people's answers to tool calls waiting for approval,
	// clicked on the platform (a Slack button…).
	Decisions []Decision
	Answer    Answer
}

// Decision is a person's answer, on a platform, to a tool call waiting for
// approval. It reaches its session as an approve update whose ID is the
// click's (a redelivered click is the same decision); a refusal (not an
// approver, nothing waiting any more) is told to the person through
// Notify and is not a failed hand-off.
type Decision struct {
	Session string
	// ID identifies the click on its platform.
	ID      string
	Request workflows.ApproveRequest
	// Notify, when set, tells the person who clicked why nothing happened.
	Notify func(ctx context.Context, text string) error
}

// Answer is a door's immediate HTTP answer.
type Answer struct {
	Status      int
	ContentType string
	Body        []byte
	// Header holds extra response headers (e.g. X-Slack-No-Retry).
	Header map[string]string
	// After, when set, is called once everything parsed was handed off,
	// and the answer it returns is sent instead: a platform that shows the
	// answer to the person who clicked (a Feishu/Lark card callback's
	// toast) learns what became of the click.
	After func() Answer
}

// Request is a webhook request as a door sees it: headers and the capped
// raw body.
type Request struct {
	Header map[string][]string
	Body   []byte
}

// Door verifies and parses a channel's webhook requests.
type Door interface {
	// Kind is the channel kind.
	Kind() string
	// Path is the ingress route ("/slack"), served for POST; "" when the
	// channel has no route (a long connection only).
	Path() string
	// Verify checks the request's signature (and timestamp window) over the
	// raw body; an error answers 401 with nothing started.
	Verify(r Request) error
	// Parse turns a verified request into messages, deliveries and the
	// answer. An error still answers with Parsed.Answer (a platform should
	// not retry what cannot be read) and hands nothing off.
	Parse(r Request) (Parsed, error)
}

// Replier renders turns' answers on a platform. It is built from the
// worker's environment (its token never enters history).
type Replier interface {
	// Kind is the channel kind.
	Kind() string
	// Render returns the renderer of one turn's reply at target; ref is the
	// platform reference an earlier attempt stored ("" for none), which the
	// renderer continues instead of posting a second message.
	Render(ctx context.Context, target wire.Target, ref string) (Render, error)
}

// Render is one turn's reply on a platform: one message (or native stream)
// updated as the turn streams, then settled to the stored answer.
type Render interface {
	// Show renders the turn's view so far. It is called on every change;
	// the renderer throttles and batches platform calls itself and honours
	// the platform's rate limits.
	Show(ctx context.Context, v *View) error
	// Ref is the platform reference of the reply ("" until one exists); the
	// caller stores it as soon as it appears.
	Ref() string
	// Finish makes the reply equal text (posting it when nothing was
	// posted) and closes any stream. It is idempotent.
	Finish(ctx context.Context, text string) error
}

// Concluder is implemented by a Render whose receiver is told how the turn
// ended besides its text (a webhook callback): Conclude is Finish with the
// turn's status (completed, failed) and error code ("" for none; a busy
// refusal is failed with agent.CodeSessionBusy).
type Concluder interface {
	Conclude(ctx context.Context, text, status, code string) error
}

// Asker is implemented by a Replier that can ask for an approval where the
// conversation is: Ask posts the waiting call (an approval_requested
// event) with buttons and returns the message's reference; Settle updates
// that message to the decision (an approval_resolved event). Both are
// called again after a retry: Ask only when no reference was stored,
// Settle must be idempotent.
type Asker interface {
	Ask(ctx context.Context, target wire.Target, session string, ev agent.Event) (ref string, err error)
	Settle(ctx context.Context, target wire.Target, ref string, ev agent.Event) error
}

// Questioner is implemented by a Replier that can show the question a
// turn's agent asked (ask_user, a question_asked event) where the
// conversation is; the person's next message there is the answer. It
// returns a reference to the message it posted.
type Questioner interface {
	Question(ctx context.Context, target wire.Target, ev agent.Event) (ref string, err error)
}

// Reactor is implemented by a Replier whose platform has reactions: React
// marks the person's message of target (Target.Message) with the
// platform's sign for stage — ReactTaken when its turn starts (or waits
// behind another), ReactAnswered once it is answered. Best effort: the
// caller ignores a failure, and calls it once per stage and turn.
type Reactor interface {
	React(ctx context.Context, target wire.Target, stage string) error
}

// Stages of Reactor.React.
const (
	ReactTaken    = "taken"
	ReactAnswered = "answered"
)

// Fetcher is implemented by a Replier whose messages carry files: it
// resolves target's attachments into the prompt — images the model can
// see as vision input, other files saved under dir (the agent's workspace)
// with their paths added to the text. Downloads are host-restricted,
// size-capped and timed out.
type Fetcher interface {
	Fetch(ctx context.Context, target wire.Target, p agent.Prompt, dir string) (agent.Prompt, error)
}

// Connector is a channel's long connection (Slack Socket Mode, the
// Feishu/Lark long connection, Telegram polling): an ingress that needs no
// public URL. Run connects, calls ready once first connected, hands each
// verified request to hand (which must return within the platform's ACK
// budget), reconnects with logging, and returns when ctx ends.
type Connector interface {
	Run(ctx context.Context, hand func(context.Context, Parsed) error, ready func()) error
}

// Channel is one enabled channel.
type Channel struct {
	// File is the channels/<kind>.yaml file that enabled it.
	File    string
	Door    Door
	Replier Replier
	// Conn is the channel's long connection, nil for a webhook channel.
	Conn Connector
	// Tools are the channel's agent tools (Slack: slack_send_file). They
	// run in the worker with the channel's credentials; a tool that
	// implements workspace.SessionTool is offered only in the sessions it
	// accepts.
	Tools []agent.Tool
	// Identity is the bot identity the door looks up on the platform (nil:
	// none to look up). The ingress serving the door resolves it with the
	// runtime's Resolver.
	Identity Identity
}

// ErrRetryLater is wrapped by a door's Parse (or a connector's message
// decoding) when it cannot handle a request yet — Feishu/Telegram before
// the bot's identity is known: the request is refused (503, or a NACK on a
// long connection) so the platform delivers it again.
var ErrRetryLater = errors.New("not ready yet; deliver again later")

// permanentError marks an error a retry cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one a retry cannot fix (a file over its size cap,
// a download host refused): the activity fails at once instead of
// retrying. A nil err stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err (or an error it wraps) was marked by
// Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// Attacher follows a turn (running, queued or finished) without sending
// it; it fails before streaming when the turn is not known (yet).
type Attacher interface {
	Attach(ctx context.Context, session, key string) (iter.Seq[agent.Event], error)
}

// Served is implemented by a Door that serves its route itself instead of
// Handler (the webhook door, which may hold a request for the answer with
// att).
type Served interface {
	Handler(c Starter, taskQueue string, log *slog.Logger, att Attacher) http.Handler
}

// Located is implemented by a Door whose file names paths (GitHub's
// executable policy): Load calls Locate with the channel file's path, to
// resolve them relative to it and check they exist.
type Located interface {
	Locate(file string) error
}

// Confined is implemented by a Door that starts processes (GitHub's
// executable policy): they run in the tool sandbox with the agent's
// protected list, never unconfined. NeedsSandbox says whether this door's
// file asks for any; Confine gives it the sandbox and the list before it
// serves. A door that needs one and has none refuses to start them.
// Executables are the files it runs (after Locate): they decide what the
// door does, so the agent's tools must not be able to change them.
type Confined interface {
	NeedsSandbox() bool
	Confine(sb *sandbox.Sandbox, protected []tools.Protected)
	Executables() []string
}

// Factory builds a channel from its file's YAML (already read) and the
// environment. It must reject unknown keys and missing secrets.
type Factory func(file []byte, getenv func(string) string) (*Channel, error)

// DirFactory builds the channels of a folder channels/<name>/ (webhook
// endpoints, one file each): every channel's File names its own file.
type DirFactory func(dir string, getenv func(string) string) ([]*Channel, error)

var (
	regMu       sync.Mutex
	registry    = map[string]Factory{}
	dirRegistry = map[string]DirFactory{}
)

// RegisterDir makes the folder channels/<name>/ available to Load. It
// panics on a duplicate name.
func RegisterDir(name string, f DirFactory) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := dirRegistry[name]; dup {
		panic("channels: folder registered twice: " + name)
	}
	dirRegistry[name] = f
}

// Register makes kind available to Load. It panics on a duplicate kind.
func Register(kind string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[kind]; dup {
		panic("channels: kind registered twice: " + kind)
	}
	registry[kind] = f
}

// Kinds lists the registered kinds.
func Kinds() []string {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]string, 0, len(registry)+len(dirRegistry))
	for k := range registry {
		out = append(out, k)
	}
	for k := range dirRegistry {
		out = append(out, k+"/")
	}
	sort.Strings(out)
	return out
}

// Load builds the enabled channels of files (workspace.Channels()). A
// disabled file is skipped; an unknown kind, a bad key, a missing secret or
// two channels on one route stop with an error naming the file.
func Load(files []workspace.FileEntry, getenv func(string) string) ([]*Channel, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var out []*Channel
	paths := map[string]string{}
	for _, f := range files {
		if !f.Enabled {
			continue
		}
		regMu.Lock()
		factory, ok := registry[f.Name]
		dirFactory, dirOK := dirRegistry[f.Name]
		regMu.Unlock()
		st, err := os.Stat(f.Path)
		isDir := err == nil && st.IsDir()
		if ext := filepath.Ext(f.Path); !isDir && ext != ".yaml" && ext != ".yml" {
			// Not a channel file: a script one uses (GitHub's executable
			// policy lives here, where no tool can change it).
			continue
		}
		if isDir {
			if !dirOK {
				return nil, fmt.Errorf("channel %s: unknown folder %q (known: %v)", f.Path, f.Name, Kinds())
			}
			chans, err := dirFactory(f.Path, getenv)
			if err != nil {
				return nil, err
			}
			for _, ch := range chans {
				if p := ch.Door.Path(); p != "" {
					if prev, dup := paths[p]; dup {
						return nil, fmt.Errorf("channel %s: route %s is already served by %s", ch.File, p, prev)
					}
					paths[p] = ch.File
				}
			}
			out = append(out, chans...)
			continue
		}
		if !ok {
			return nil, fmt.Errorf("channel %s: unknown kind %q (known: %v)", f.Path, f.Name, Kinds())
		}
		data, err := os.ReadFile(f.Path)
		if err != nil {
			return nil, fmt.Errorf("channel %s: %w", f.Path, err)
		}
		ch, err := factory(data, getenv)
		if err != nil {
			return nil, fmt.Errorf("channel %s: %w", f.Path, err)
		}
		ch.File = f.Path
		if l, ok := ch.Door.(Located); ok {
			if err := l.Locate(f.Path); err != nil {
				return nil, fmt.Errorf("channel %s: %w", f.Path, err)
			}
		}
		if p := ch.Door.Path(); p != "" {
			if prev, dup := paths[p]; dup {
				return nil, fmt.Errorf("channel %s: route %s is already served by %s", f.Path, p, prev)
			}
			paths[p] = f.Path
		}
		out = append(out, ch)
	}
	return out, nil
}

// Decode decodes a channel file's YAML into v, rejecting unknown keys. An
// empty file leaves v unchanged.
func Decode(file []byte, v any) error {
	if len(bytes.TrimSpace(file)) == 0 {
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(file))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// Policy checks a chat channel file's session and group options and
// returns them as the chat workflow's policy. groupKey names the file's
// group-session key ("groupSession" for Slack, "groupMessageSession" for
// Feishu/Lark) in errors.
func Policy(directSession, groupKey, groupSession, groupMode string) (wire.ChatPolicy, error) {
	return PolicyWhileBusy(directSession, groupKey, groupSession, groupMode, "")
}

// PolicyWhileBusy is Policy with the file's whileBusy (what a message does
// while its session is busy; "": the agent's conversation.whileBusy, else
// queue).
func PolicyWhileBusy(directSession, groupKey, groupSession, groupMode, whileBusy string) (wire.ChatPolicy, error) {
	if err := CheckWhileBusy("whileBusy", whileBusy); err != nil {
		return wire.ChatPolicy{}, err
	}
	p, err := policyOf(directSession, groupKey, groupSession, groupMode)
	p.WhileBusy = whileBusy
	return p, err
}

// CheckWhileBusy checks a whileBusy setting named key.
func CheckWhileBusy(key, mode string) error {
	if !workflows.ValidWhileBusy(mode) {
		return fmt.Errorf("%s: %q is not one of %s", key, mode, strings.Join(workflows.WhileBusyModes, ", "))
	}
	return nil
}

// BusyDefaulter is implemented by a Door whose messages carry a whileBusy
// mode: DefaultWhileBusy gives it the agent's (fastagent.yaml's
// conversation.whileBusy), which applies unless its file set one.
type BusyDefaulter interface {
	DefaultWhileBusy(mode string)
}

// DefaultWhileBusy gives every door of chans that takes one the agent's
// whileBusy mode (see BusyDefaulter); call it after Load.
func DefaultWhileBusy(chans []*Channel, mode string) {
	if mode == "" {
		return
	}
	for _, ch := range chans {
		if d, ok := ch.Door.(BusyDefaulter); ok {
			d.DefaultWhileBusy(mode)
		}
	}
}

func policyOf(directSession, groupKey, groupSession, groupMode string) (wire.ChatPolicy, error) {
	p := wire.ChatPolicy{DirectSession: directSession, GroupSession: groupSession, GroupMode: groupMode}
	for _, o := range []struct{ key, val string }{{"directMessageSession", p.DirectSession}, {groupKey, p.GroupSession}} {
		if o.val != "" && o.val != wire.SessionThread && o.val != wire.SessionContinuous {
			return p, fmt.Errorf("%s: %q is not one of thread, continuous", o.key, o.val)
		}
	}
	if p.GroupMode != "" && p.GroupMode != wire.GroupMentions && p.GroupMode != wire.GroupContext {
		return p, fmt.Errorf("groupMode: %q is not one of mentions, context", p.GroupMode)
	}
	return p, nil
}
