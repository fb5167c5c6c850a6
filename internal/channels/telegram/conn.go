package telegram

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
)

// Conn is the polling transport (transport: polling): getUpdates with an
// offset, long-polled. It deletes any webhook first (the Bot API refuses
// getUpdates while one is set), calls ready after the first successful
// poll, hands each batch to Temporal and only then moves the offset past
// it — a failed hand-off polls the same updates again (the chat workflow
// deduplicates them). It returns when ctx ends.
type Conn struct {
	Door *Door
	API  *API
	Log  *slog.Logger
	// PollTimeout is getUpdates' long-poll timeout; default 25 s.
	PollTimeout time.Duration
	// Backoff is the wait after a failed poll or hand-off; default 2 s.
	Backoff time.Duration
}

// Run implements channels.Connector.
func (c *Conn) Run(ctx context.Context, hand func(context.Context, channels.Parsed) error, ready func()) error {
	log := c.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("kind", Kind, "transport", TransportPolling)
	poll, backoff := c.PollTimeout, c.Backoff
	if poll <= 0 {
		poll = 25 * time.Second
	}
	if backoff <= 0 {
		backoff = 2 * time.Second
	}
	pause := backoff
	wait := func() bool {
		t := time.NewTimer(pause)
		pause = backoff
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	if c.Door.Bot != nil {
		rctx, cancel := context.WithTimeout(ctx, botLookupTimeout)
		err := c.Door.Bot.Resolve(rctx)
		cancel()
		if err != nil {
			log.Warn("telegram: bot identity unknown: group messages are read again until it is", "error", err)
		}
	}
	for {
		err := c.API.Call(ctx, "deleteWebhook", map[string]any{"drop_pending_updates": false}, nil)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil //nolint:nilerr // cancelled: a clean stop, not a failure
		}
		log.Warn("telegram: deleteWebhook failed; retrying", "error", err)
		if !wait() {
			return nil
		}
	}
	var offset int64
	readied := false
	for {
		var ups []Update
		params := map[string]any{"offset": offset, "timeout": int(poll / time.Second), "allowed_updates": []string{"message", "edited_message"}}
		pctx, cancel := context.WithTimeout(ctx, poll+10*time.Second)
		err := c.API.Call(pctx, "getUpdates", params, &ups)
		cancel()
		if ctx.Err() != nil {
			log.Info("telegram: polling stopped")
			return nil //nolint:nilerr // cancelled: a clean stop, not a failure
		}
		if err != nil {
			log.Warn("telegram: getUpdates failed; retrying", "error", err)
			if d := RetryAfter(err); d > backoff {
				pause = min(d, time.Minute)
			}
			if !wait() {
				return nil
			}
			continue
		}
		if !readied {
			readied = true
			log.Info("telegram: polling")
			ready()
		}
		if len(ups) == 0 {
			continue
		}
		p, later := c.read(ctx, log, ups)
		if len(p.Messages) > 0 {
			if err := hand(ctx, p); err != nil {
				log.Error("telegram: hand-off failed; polling the same updates again", "error", err)
				if !wait() {
					return nil
				}
				continue
			}
		}
		if later {
			// The messages before the deferred one were handed off: a
			// second hand-off is deduplicated by the chat workflow.
			if !wait() {
				return nil
			}
			continue
		}
		for _, u := range ups {
			if u.UpdateID >= offset {
				offset = u.UpdateID + 1
			}
		}
	}
}

// read turns a batch of updates into messages to hand off. later says an
// update was deferred (channels.ErrRetryLater): it and the ones after it
// are read again, so the offset must stay before it.
func (c *Conn) read(ctx context.Context, log *slog.Logger, ups []Update) (p channels.Parsed, later bool) {
	for _, u := range ups {
		m, err := c.Door.Message(ctx, u)
		if errors.Is(err, channels.ErrRetryLater) {
			log.Warn("telegram: update deferred", "update_id", u.UpdateID, "error", err)
			return p, true
		}
		if err != nil {
			log.Warn("telegram: unreadable update skipped", "update_id", u.UpdateID, "error", err)
			continue
		}
		if m != nil {
			p.Messages = append(p.Messages, *m)
		}
	}
	return p, false
}
