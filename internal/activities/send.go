package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/wire"
)

// Send is the Channel.Send activity: it sends in.Text to each of
// in.Targets exactly once (delivery.Deliver under (in.Session, in.Key +
// "/" + target)), so a retried attempt sends only what is still unsent.
// A target that failed in a way a retry may fix fails the attempt (the
// retry policy runs it again); when only failures a retry cannot fix are
// left (a bad target, a channel not configured), the activity fails
// without retrying. Every failure names its target.
func (r *Replies) Send(ctx context.Context, in wire.SendInput) (wire.SendResult, error) {
	var res wire.SendResult
	var failed []string
	retry := false
	for _, s := range in.Targets {
		t, err := delivery.ParseTarget(s)
		if err == nil {
			_, err = delivery.Deliver(ctx, r.Senders, r.Store, t, in.Session, in.Key+"/"+t.String(), in.Text, nil)
		} else {
			err = delivery.Permanent(err)
		}
		if err != nil {
			r.log().Warn("delivery failed", "session", in.Session, "key", in.Key, "target", s, "error", err,
				"retried", !delivery.IsPermanent(err))
			failed = append(failed, fmt.Sprintf("%s: %v", s, err))
			retry = retry || !delivery.IsPermanent(err)
			continue
		}
		r.log().Info("delivered", "session", in.Session, "key", in.Key, "target", s)
		res.Delivered = append(res.Delivered, s)
	}
	if len(failed) == 0 {
		return res, nil
	}
	msg := "delivery failed: " + strings.Join(failed, "; ")
	if ctx.Err() != nil {
		return res, errors.Join(errors.New(msg), ctx.Err())
	}
	// The failure carries the targets reached (its details), so the
	// workflow can record them when the retries are spent.
	if retry {
		return res, temporal.NewApplicationError(msg, SendFailed, res)
	}
	return res, temporal.NewNonRetryableApplicationError(msg, agent.CodeInvalidCommand, nil, res)
}

// SendFailed is the error type of a Channel.Send attempt a retry may fix.
const SendFailed = "delivery_failed"
