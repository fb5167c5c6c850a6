package activities

import (
	"context"
	"fmt"

	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/wire"
)

// Publish is the Feed.Publish local activity: it puts an event the
// workflow decided (a tool call waiting for approval, the decision) on the
// turn's live feed, where relays show it like any other event of its step.
func (a *Activities) Publish(ctx context.Context, in wire.PublishInput) error {
	if a.Feed == nil {
		return nil
	}
	ev := in.Event
	if err := a.Feed.Publish(ctx, feed.Message{Session: in.Session, Turn: in.Turn, Kind: feed.KindEvent, Step: in.Step, Event: &ev}); err != nil {
		return fmt.Errorf("publish %s of turn %s: %w", ev.Type, in.Turn, err)
	}
	if err := a.Feed.Flush(ctx); err != nil {
		return fmt.Errorf("publish %s of turn %s: %w", ev.Type, in.Turn, err)
	}
	return nil
}
