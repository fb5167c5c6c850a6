package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/workflows"
)

// BusyText is the reply to a message that found its session's queue full.
const BusyText = "I'm busy with earlier messages in this conversation and could not take this one. Please send it again in a moment."

// Replies is the Channel.Reply activity: it posts a channel turn's stored
// answer through the replier of the turn's channel kind. Secrets live in
// the repliers (built from the worker's environment), never in arguments.
type Replies struct {
	Store    store.Store
	Repliers map[string]channels.Replier
	Logger   *slog.Logger
}

// NewReplies returns the activity with repliers indexed by kind.
func NewReplies(st store.Store, repliers []channels.Replier, log *slog.Logger) *Replies {
	r := &Replies{Store: st, Repliers: map[string]channels.Replier{}, Logger: log}
	for _, rp := range repliers {
		r.Repliers[rp.Kind()] = rp
	}
	return r
}

// Register registers the activity under workflows.ActivityChannelReply.
func (r *Replies) Register(w Registrar) {
	w.RegisterActivityWithOptions(r.Reply, activity.RegisterOptions{Name: workflows.ActivityChannelReply})
}

// Reply posts the answer of in.Turn, or updates the message posted for it
// by an earlier attempt (its reference is kept in the session store under
// (session, turn)), so a retried reply never posts twice. A busy notice is
// posted only when nothing was posted for the turn.
func (r *Replies) Reply(ctx context.Context, in workflows.ReplyInput) error {
	rp := r.Repliers[in.Reply.Kind]
	if rp == nil {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("reply: no %q channel is configured on this worker", in.Reply.Kind), agent.CodeInvalidCommand, nil)
	}
	text := BusyText
	if !in.Busy {
		var err error
		if text, err = r.answer(ctx, in); err != nil {
			return err
		}
	}
	ref, err := r.Store.Reply(ctx, in.Session, in.Turn)
	switch {
	case err == nil:
		if in.Busy {
			return nil
		}
		if err := rp.Update(ctx, in.Reply.Data, ref, text); err != nil {
			return fmt.Errorf("reply: turn %q: %w", in.Turn, err)
		}
		return nil
	case !errors.Is(err, store.ErrNotFound):
		return storeError(err)
	}
	ref, err = rp.Post(ctx, in.Reply.Data, text)
	if err != nil {
		return fmt.Errorf("reply: turn %q: %w", in.Turn, err)
	}
	if err := r.Store.SaveReply(ctx, in.Session, in.Turn, ref); err != nil {
		return storeError(err)
	}
	r.log().Info("channel reply posted", "kind", in.Reply.Kind, "session", in.Session, "turn", in.Turn, "busy", in.Busy)
	return nil
}

// answer is the turn's stored answer (the step texts joined), or a short
// note when the turn stored none.
func (r *Replies) answer(ctx context.Context, in workflows.ReplyInput) (string, error) {
	var steps []string
	if in.Outcome.First != "" && in.Outcome.Leaf != "" {
		var err error
		if steps, err = relay.StoredSteps(ctx, r.Store, in.Session, in.Outcome); err != nil {
			return "", storeError(err)
		}
	}
	var parts []string
	for _, s := range steps {
		if s = strings.TrimSpace(s); s != "" {
			parts = append(parts, s)
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "\n\n"), nil
	}
	if in.Outcome.Status == agent.TypeFailed {
		return "Sorry, I could not answer: " + in.Outcome.Details, nil
	}
	return "(no answer)", nil
}

func (r *Replies) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}
