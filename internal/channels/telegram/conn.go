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
	pace := &pacer{backoff: backoff, pause: backoff}
	c.resolveBot(ctx, log)
	if !c.deleteWebhook(ctx, log, pace) {
		return nil
	}
	return c.poll(ctx, log, pace, poll, hand, ready)
}

// pacer spaces out retries: it waits backoff, or once a longer pause the
// Bot API asked for.
type pacer struct {
	backoff, pause time.Duration
}

// retryAfter makes the next wait d (at most a minute) when d is longer
// than the backoff.
func (p *pacer) retryAfter(d time.Duration) {
	if d > p.backoff {
		p.pause = min(d, time.Minute)
	}
}

// wait sleeps the pause; false when ctx ended first.
func (p *pacer) wait(ctx context.Context) bool {
	t := time.NewTimer(p.pause)
	p.pause = p.backoff
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// resolveBot learns the bot's identity, which group messages need; on
// failure it logs and polling goes on (the door asks again later).
func (c *Conn) resolveBot(ctx context.Context, log *slog.Logger) {
	if c.Door.Bot == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, botLookupTimeout)
	err := c.Door.Bot.Resolve(rctx)
	cancel()
	if err != nil {
		log.Warn("telegram: bot identity unknown: group messages are read again until it is", "error", err)
	}
}

// deleteWebhook removes any webhook, retrying until it succeeds; false
// when ctx ended first.
func (c *Conn) deleteWebhook(ctx context.Context, log *slog.Logger, pace *pacer) bool {
	for {
		err := c.API.Call(ctx, "deleteWebhook", map[string]any{"drop_pending_updates": false}, nil)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("telegram: deleteWebhook failed; retrying", "error", err)
		if !pace.wait(ctx) {
			return false
		}
	}
}

// poll long-polls getUpdates until ctx ends, calls ready after the first
// successful poll, and moves the offset past a batch only once it is
// handed off.
func (c *Conn) poll(ctx context.Context, log *slog.Logger, pace *pacer, timeout time.Duration,
	hand func(context.Context, channels.Parsed) error, ready func()) error {
	var offset int64
	readied := false
	for {
		ups, err := c.getUpdates(ctx, offset, timeout)
		if ctx.Err() != nil {
			log.Info("telegram: polling stopped")
			return nil //nolint:nilerr // cancelled: a clean stop, not a failure
		}
		if err != nil {
			log.Warn("telegram: getUpdates failed; retrying", "error", err)
			pace.retryAfter(RetryAfter(err))
			if !pace.wait(ctx) {
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
		if !c.deliver(ctx, log, ups, hand) {
			if !pace.wait(ctx) {
				return nil
			}
			continue
		}
		offset = nextOffset(offset, ups)
	}
}

// getUpdates is one long poll from offset.
func (c *Conn) getUpdates(ctx context.Context, offset int64, timeout time.Duration) ([]Update, error) {
	var ups []Update
	params := map[string]any{"offset": offset, "timeout": int(timeout / time.Second), "allowed_updates": AllowedUpdates}
	pctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()
	err := c.API.Call(pctx, "getUpdates", params, &ups)
	return ups, err
}

// deliver hands a batch's messages off. It reports whether the offset may
// move past the batch: not when the hand-off failed or an update was
// deferred (the batch is polled again; the messages before the deferred
// one were handed off, and the chat workflow deduplicates a second
// hand-off).
func (c *Conn) deliver(ctx context.Context, log *slog.Logger, ups []Update, hand func(context.Context, channels.Parsed) error) bool {
	p, later := c.read(ctx, log, ups)
	if len(p.Messages) > 0 || len(p.Decisions) > 0 {
		if err := hand(ctx, p); err != nil {
			log.Error("telegram: hand-off failed; polling the same updates again", "error", err)
			return false
		}
	}
	return !later
}

// nextOffset is the offset past every update of a batch.
func nextOffset(offset int64, ups []Update) int64 {
	for _, u := range ups {
		if u.UpdateID >= offset {
			offset = u.UpdateID + 1
		}
	}
	return offset
}

// AllowedUpdates are the update types the channel asks Telegram for.
var AllowedUpdates = []string{"message", "edited_message", "callback_query"}

// read turns a batch of updates into messages to hand off. later says an
// update was deferred (channels.ErrRetryLater): it and the ones after it
// are read again, so the offset must stay before it.
func (c *Conn) read(ctx context.Context, log *slog.Logger, ups []Update) (p channels.Parsed, later bool) {
	for _, u := range ups {
		if u.CallbackQuery != nil {
			if m, _ := c.Door.StopClick(u); m != nil {
				p.Messages = append(p.Messages, *m)
				continue
			}
			dec, err := c.Door.Decision(u)
			if err != nil {
				log.Warn("telegram: unreadable button press skipped", "update_id", u.UpdateID, "error", err)
			} else if dec != nil {
				p.Decisions = append(p.Decisions, *dec)
			}
			continue
		}
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
