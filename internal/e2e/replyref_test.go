package e2e

import (
	"context"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// scheduledReplies calls fn with the input of each live reply
// (Channel.Stream) and reply (Channel.Reply) the session's current run
// scheduled, in order, until fn returns true.
func scheduledReplies(t *testing.T, e *env, session string, fn func(kind string, in wire.ReplyInput) bool) {
	t.Helper()
	it := e.client.GetWorkflowHistory(context.Background(), workflows.WorkflowID(session), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", session, err)
		}
		a := ev.GetActivityTaskScheduledEventAttributes()
		kind := a.GetActivityType().GetName()
		if a == nil || kind != workflows.ActivityChannelStream && kind != workflows.ActivityChannelReply {
			continue
		}
		// A StreamInput decodes into the fields they share (turn, ref).
		var in wire.ReplyInput
		if err := converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &in); err != nil {
			t.Fatalf("%s input in %s: %v", kind, session, err)
		}
		if fn(kind, in) {
			return
		}
	}
}

// scheduledReply is the input of the Channel.Reply that settles turn's
// answer, as the session scheduled it (ok is false while there is none): a
// retried attempt of the activity gets this very input.
func scheduledReply(t *testing.T, e *env, session, turn string) (in wire.ReplyInput, ok bool) {
	t.Helper()
	scheduledReplies(t, e, session, func(kind string, got wire.ReplyInput) bool {
		if kind == workflows.ActivityChannelReply && got.Turn == turn && !got.Busy {
			in, ok = got, true
		}
		return ok
	})
	return in, ok
}

// storedReply is the platform reference of turn's reply as the session
// keeps it: under the reference key of the turn's run (wire.ReplyRef,
// the Ref its live reply or reply was scheduled with), else under the
// turn's key (runs from before per-run references). store.ErrNotFound
// while none is kept.
func storedReply(t *testing.T, e *env, session, turn string) (string, error) {
	t.Helper()
	key := ""
	scheduledReplies(t, e, session, func(_ string, in wire.ReplyInput) bool {
		if in.Turn == turn && !in.Busy {
			key = in.Ref
			if key == "" {
				key = turn
			}
		}
		return key != ""
	})
	if key == "" {
		return "", store.ErrNotFound
	}
	ref, err := e.kit.Store.Reply(context.Background(), session, key)
	if err == nil && ref == "" {
		err = store.ErrNotFound
	}
	return ref, err
}
