package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/wire"
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

// StopTurn is the Feed.Stop local activity: the workflow tells every worker
// that the turn's running activities must stop now.
func (a *Activities) StopTurn(ctx context.Context, in wire.TurnStopInput) error {
	if a.Feed == nil {
		return nil
	}
	return a.Feed.Stop(ctx, in.Session, in.Turn)
}
