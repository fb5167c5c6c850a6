package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// The answers of the chat commands (wire.Command*).
const (
	// NothingRunningText answers a /stop that found no turn running (a
	// second /stop, a double click).
	NothingRunningText = "Nothing is running, so there is nothing to stop."
	// NewSessionText answers /new.
	NewSessionText = "Started a fresh session here: the earlier messages of this conversation are no longer in my context."
	// NoPlaceText answers a command sent at the top level of a
	// conversation where each message starts a session of its own.
	NoPlaceText = "Here each message at the top level starts a session of its own, so there is no running session to act on. /stop, /new and /status work in a thread I answered, or where the conversation is one session."
	// HelpText answers /help.
	HelpText = "Commands (send one on its own, addressed to me):\n" +
		"/stop — stop what I am doing now\n" +
		"/new — start a fresh session here: I forget the earlier messages\n" +
		"/status — what I am doing, what is waiting, the tokens used\n" +
		"/help — this list"
)

// querier is the part of a Temporal client /status needs.
type querier interface {
	QueryWorkflow(ctx context.Context, workflowID string, runID string, queryType string, args ...interface{}) (converter.EncodedValue, error)
}

// Command is the Chat.Command local activity: it runs a chat command and
// answers it where it was sent. /stop aborts the running turn of
// in.Session (the abort's update ID derives from the command message, so
// a retried command stops one turn once) and says so only when nothing
// was running; /new, /status and /help answer. The answer is posted once
// however often the activity is retried (its reference is kept under the
// command's key).
func (r *Replies) Command(ctx context.Context, in wire.CommandInput) error {
	var text string
	switch in.Command {
	case wire.CommandStop:
		if in.Session == "" {
			text = NothingRunningText
			break
		}
		stopped, err := r.abortFor(ctx, in)
		if err != nil {
			return err
		}
		if stopped != "" {
			// The stopped turn's own reply says it was stopped.
			r.log().Info("chat command: turn stopped", "session", in.Session, "turn", stopped)
			return nil
		}
		text = NothingRunningText
	case wire.CommandNew:
		text = NewSessionText
		if in.Session == "" {
			text = NoPlaceText
		}
	case wire.CommandStatus:
		var err error
		if text, err = r.status(ctx, in.Session); err != nil {
			return err
		}
	case wire.CommandHelp:
		text = HelpText
	default:
		text = fmt.Sprintf("I do not know the command /%s.\n\n%s", in.Command, HelpText)
	}
	if in.Reply == nil {
		return nil
	}
	return r.notice(ctx, in.Session, in.Key+"#"+in.Command, *in.Reply, text)
}

// abortFor aborts the running turn of in.Session for command in: the
// turn stopped, or "" when none ran (or the session does not exist).
func (r *Replies) abortFor(ctx context.Context, in wire.CommandInput) (string, error) {
	u, ok := r.starter(ctx).(updater)
	if !ok {
		return "", temporal.NewNonRetryableApplicationError("stop: this worker has no Temporal client for chat control",
			agent.CodeInvalidCommand, nil)
	}
	h, err := u.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.WorkflowID(in.Session),
		UpdateID:     "stop:" + in.Key,
		UpdateName:   workflows.UpdateAbort,
		Args:         []any{workflows.AbortRequest{Turn: in.Turn, Reason: in.Reason}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res workflows.AbortResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	var nf *serviceerror.NotFound
	var app *temporal.ApplicationError
	switch {
	case err == nil:
		return res.Turn, nil
	case errors.As(err, &nf), errors.As(err, &app) && app.Type() == agent.CodeNoActiveRun:
		return "", nil
	}
	return "", fmt.Errorf("stop: session %q: %w", in.Session, err)
}

// status describes session's state for /status.
func (r *Replies) status(ctx context.Context, session string) (string, error) {
	if session == "" {
		return NoPlaceText, nil
	}
	q, ok := r.starter(ctx).(querier)
	if !ok {
		return "", temporal.NewNonRetryableApplicationError("status: this worker has no Temporal client for chat control",
			agent.CodeInvalidCommand, nil)
	}
	var v workflows.SessionView
	enc, err := q.QueryWorkflow(ctx, workflows.WorkflowID(session), "", workflows.QueryState)
	if err == nil {
		err = enc.Get(&v)
	}
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return "Nothing has run in this session yet.", nil
	case err != nil:
		return "", fmt.Errorf("status: session %q: %w", session, err)
	}
	return StatusText(v), nil
}

// StatusText is /status's answer for a session's state.
func StatusText(v workflows.SessionView) string {
	var b strings.Builder
	if v.Running != "" {
		b.WriteString("Working on a message now (turn " + v.Running + ").")
	} else {
		b.WriteString("Nothing is running.")
	}
	switch n := len(v.Queued); n {
	case 0:
		b.WriteString(" Nothing is waiting.")
	case 1:
		b.WriteString(" 1 message is waiting.")
	default:
		fmt.Fprintf(&b, " %d messages are waiting.", n)
	}
	if n := len(v.Approvals); n > 0 {
		fmt.Fprintf(&b, " %d tool call(s) wait for approval.", n)
	}
	if n := len(v.Questions); n > 0 {
		fmt.Fprintf(&b, " %d question(s) wait for an answer.", n)
	}
	fmt.Fprintf(&b, "\nTurns: %d. Tokens used: %d in, %d out", v.Turns, v.Usage.Input, v.Usage.Output)
	if v.Today.Day != "" {
		fmt.Fprintf(&b, " (today: %d)", v.Today.Usage.Tokens())
	}
	b.WriteString(".")
	return b.String()
}

// Answers of the commands a session runs itself (wire.Notice*).
const (
	// FreshContextText answers /new where the session keeps its name (a
	// GitHub issue's): its context starts afresh.
	FreshContextText = "Starting afresh: the earlier messages here are no longer in my context."
	// NewBusyText answers /new while a turn runs or waits.
	NewBusyText = "I am still working on a message here. Send /new again once I have answered, or /stop me first."
)

// commandNotice posts the answer to a chat command a session ran itself
// (ReplyInput.Notice), once.
func (r *Replies) commandNotice(ctx context.Context, in wire.ReplyInput) error {
	var text string
	switch in.Notice {
	case wire.NoticeNothingRunning:
		text = NothingRunningText
	case wire.NoticeNew:
		text = FreshContextText
	case wire.NoticeNewBusy:
		text = NewBusyText
	case wire.NoticeStatus:
		var err error
		if text, err = r.status(ctx, in.Session); err != nil {
			return err
		}
	default:
		text = HelpText
	}
	return r.notice(ctx, in.Session, in.Turn+"#notice", in.Reply, text)
}

// notice posts text as a message of its own at reply, once: its
// reference is kept under key in the session store (a retry finds it
// and posts nothing more).
func (r *Replies) notice(ctx context.Context, session, key string, reply wire.ReplyTarget, text string) error {
	if session == "" {
		session = "chat-commands"
	}
	rd, ref, err := r.render(ctx, session, key, reply)
	if err != nil {
		return err
	}
	if ref != "" {
		return nil
	}
	if err := rd.Finish(ctx, text); err != nil {
		return fmt.Errorf("chat command: answer: %w", err)
	}
	return r.saveRef(ctx, session, key, rd, &ref)
}
