package activities

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

// stoppable returns ctx cancelled (with cause feed.ErrStopped) as soon as a
// stop notice for the turn reaches bus: an aborted turn's model stream,
// tool or live reply stops within milliseconds of the workflow's decision,
// not at the activity's next heartbeat, so heartbeats need only be as
// frequent as crash detection needs. done releases the watch.
func stoppable(ctx context.Context, bus feed.Bus, session, turn string) (_ context.Context, done func()) {
	if bus == nil || session == "" || turn == "" {
		return ctx, func() {}
	}
	stopped, release := bus.WatchStop(session, turn)
	sctx, cancel := context.WithCancelCause(ctx)
	finished := make(chan struct{})
	go func() {
		select {
		case <-stopped:
			cancel(feed.ErrStopped)
		case <-finished:
		case <-sctx.Done():
		}
	}()
	return sctx, func() {
		close(finished)
		release()
		cancel(nil)
	}
}

// stoppedError is what an activity returns when its turn was stopped —
// its context cancelled by the stop notice (even if the call finished at
// that instant: the workflow no longer waits for it), or err itself
// feed.ErrStopped — and err unchanged otherwise. The error is not
// retryable: the workflow has already moved on, and a retry would only run
// the stopped call again; it may reach the server before the workflow's
// cancellation does.
func stoppedError(ctx context.Context, err error) error {
	if !errors.Is(context.Cause(ctx), feed.ErrStopped) && !errors.Is(err, feed.ErrStopped) {
		return err
	}
	return temporal.NewNonRetryableApplicationError("stopped: the session stopped the turn's running calls", workflows.ErrStopped, err)
}

// stopped reports whether ctx was cancelled by its turn's stop notice.
func stopped(ctx context.Context) bool { return errors.Is(context.Cause(ctx), feed.ErrStopped) }

// StoppedUsage estimates what a model call stopped while it streamed used
// (the provider reports usage only at the end of a reply): input, the
// request's estimated size in tokens; output, the characters streamed
// (text and thinking) divided by 4, rounded up.
func StoppedUsage(inputTokens, streamedChars int) agent.Usage {
	return agent.Usage{Input: int64(max(inputTokens, 0)), Output: int64((max(streamedChars, 0) + 3) / 4), Calls: 1}
}

// reportStopped publishes on the turn's feed (feed.KindUsage) what the
// model call of step s used though its turn stopped it: the provider's
// report when the reply finished at that instant (err nil), else
// StoppedUsage of the request's size (inputTokens) and the characters
// streamed. The workflow, which has moved on, never hears of this call's
// result: the ingress adds this to the charge of the turn
// (limits.perPrincipal.tokensPerDay), so that stopping a streaming reply
// does not make its text free.
func (a *Activities) reportStopped(ctx context.Context, s modelStep, inputTokens, streamedChars int, msg *transcript.Message, err error) {
	u := StoppedUsage(inputTokens, streamedChars)
	if r := msg.Usage; err == nil && r != nil && r.Input+r.Output > 0 {
		u = agent.Usage{Input: int64(r.Input), Output: int64(r.Output), CacheRead: int64(r.CacheRead), CacheWrite: int64(r.CacheWrite), Calls: 1}
	}
	// ctx is cancelled: the message must still go out.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s.pub.send(pctx, feed.Message{Kind: feed.KindUsage, Step: s.call.Step, Attempt: s.attempt, Usage: &u})
	s.pub.flush(pctx)
}

// StopTurn is the Feed.Stop local activity: the workflow tells every worker
// that the turn's running activities must stop now.
func (a *Activities) StopTurn(ctx context.Context, in wire.TurnStopInput) error {
	if a.Feed == nil {
		return nil
	}
	return a.Feed.Stop(ctx, in.Session, in.Turn)
}
