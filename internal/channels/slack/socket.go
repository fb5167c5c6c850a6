package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/fastagent/fastagent/internal/channels"
)

// Socket is the Slack channel's Socket Mode connection (a
// channels.Connector): Slack pushes the Events API payloads over a
// websocket opened with an app-level token, so no public URL is needed.
// Each envelope is parsed by the same door as the HTTP route, handed off
// durably, and only then acknowledged: an envelope whose hand-off failed
// is not acknowledged, and Slack redelivers it (the chat workflow
// deduplicates the redelivery).
type Socket struct {
	Door *Door
	// AppToken is the app-level token (xapp-…) apps.connections.open takes.
	AppToken string
	// BotToken is the Web API token of the client the connection embeds.
	BotToken string
	// APIURL overrides the Web API base URL ("" = Slack's).
	APIURL string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Options are extra socketmode options (tests: ping interval).
	Options []socketmode.Option
}

// SetLogger sets the logger Run logs to (the serving process's own).
func (s *Socket) SetLogger(l *slog.Logger) { s.Logger = l }

// Run implements channels.Connector: it connects (socketmode reconnects by
// itself, with backoff), calls ready on the first connection, hands every
// Events API envelope to hand and acknowledges it once hand succeeded. It
// returns nil when ctx ends, and an error when the connection cannot be
// kept (a bad token).
func (s *Socket) Run(ctx context.Context, hand func(context.Context, channels.Parsed) error, ready func()) error {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("kind", Kind, "transport", TransportSocket)
	opts := []slack.Option{slack.OptionAppLevelToken(s.AppToken)}
	if s.APIURL != "" {
		opts = append(opts, slack.OptionAPIURL(strings.TrimSuffix(s.APIURL, "/")+"/"))
	}
	sm := socketmode.New(slack.New(s.BotToken, opts...), s.Options...)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sm.RunContext(ctx) }()
	var once sync.Once
	for {
		select {
		case err := <-done:
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("connection ended")
			}
			return fmt.Errorf("slack: socket mode: %w", err)
		case evt := <-sm.Events:
			switch evt.Type {
			case socketmode.EventTypeConnected:
				if c, ok := evt.Data.(*socketmode.ConnectedEvent); ok && c.ConnectionCount > 0 {
					log.Info("slack: socket mode reconnected", "connection", c.ConnectionCount)
				} else {
					log.Info("slack: socket mode connected")
				}
				once.Do(ready)
			case socketmode.EventTypeConnectionError:
				if e, ok := evt.Data.(*slack.ConnectionErrorEvent); ok {
					log.Warn("slack: socket mode cannot connect; retrying", "attempt", e.Attempt, "backoff", e.Backoff, "error", e.ErrorObj)
				}
			case socketmode.EventTypeInvalidAuth:
				log.Error("slack: socket mode: the app-level token was refused")
			case socketmode.EventTypeIncomingError:
				if e, ok := evt.Data.(*slack.IncomingEventError); ok {
					log.Warn("slack: socket mode read failed; reconnecting", "error", e.ErrorObj)
				}
			case socketmode.EventTypeErrorBadMessage:
				s.badMessage(ctx, sm, evt, log)
			case socketmode.EventTypeEventsAPI:
				s.envelope(ctx, sm, evt.Request, hand, log)
			case socketmode.EventTypeInteractive:
				// Approval and Stop buttons: the same decisions and stop
				// commands as on the HTTP route.
				s.interactive(ctx, sm, evt.Request, hand, log)
			case socketmode.EventTypeSlashCommand:
				// Not served: acknowledge so Slack does not retry them.
				if evt.Request != nil {
					s.ack(ctx, sm, evt.Request.EnvelopeID, log)
				}
			}
		}
	}
}

// interactive hands the decisions of one interactive envelope (an
// approval button clicked) to their sessions, then acknowledges it.
func (s *Socket) interactive(ctx context.Context, sm *socketmode.Client, req *socketmode.Request,
	hand func(context.Context, channels.Parsed) error, log *slog.Logger) {
	if req == nil {
		return
	}
	parsed, err := s.Door.parseCallback(ctx, req.Payload)
	if err != nil {
		log.Warn("slack: unparsable interaction acknowledged", "envelope", req.EnvelopeID, "error", err)
	} else if len(parsed.Decisions) > 0 || len(parsed.Messages) > 0 {
		if err := hand(ctx, parsed); err != nil {
			log.Error("slack: decision hand-off failed; envelope not acknowledged (Slack redelivers it)",
				"envelope", req.EnvelopeID, "error", err)
			return
		}
	}
	s.ack(ctx, sm, req.EnvelopeID, log)
}

// envelope parses one events_api envelope with the door, hands it off and
// acknowledges it. An unreadable payload is acknowledged (a redelivery
// would be just as unreadable); a failed hand-off is not.
func (s *Socket) envelope(ctx context.Context, sm *socketmode.Client, req *socketmode.Request,
	hand func(context.Context, channels.Parsed) error, log *slog.Logger) {
	if req == nil {
		return
	}
	parsed, err := s.Door.parsePayload(req.Payload) //nolint:contextcheck // assistant thread calls outlive the envelope on purpose
	if err != nil {
		log.Warn("slack: unparsable envelope acknowledged", "envelope", req.EnvelopeID, "error", err)
		s.ack(ctx, sm, req.EnvelopeID, log)
		return
	}
	if len(parsed.Messages) > 0 || len(parsed.Deliveries) > 0 {
		if err := hand(ctx, parsed); err != nil {
			log.Error("slack: hand-off failed; envelope not acknowledged (Slack redelivers it)",
				"envelope", req.EnvelopeID, "retry_attempt", req.RetryAttempt, "error", err)
			return
		}
	}
	s.ack(ctx, sm, req.EnvelopeID, log)
}

// badMessage acknowledges an envelope socketmode could not parse (an
// unknown inner event type), as the HTTP door answers 200 to it.
func (s *Socket) badMessage(ctx context.Context, sm *socketmode.Client, evt socketmode.Event, log *slog.Logger) {
	bad, ok := evt.Data.(*socketmode.ErrorBadMessage)
	if !ok {
		return
	}
	var req socketmode.Request
	if json.Unmarshal(bad.Message, &req) != nil || req.EnvelopeID == "" {
		log.Warn("slack: unreadable socket mode message", "error", bad.Cause)
		return
	}
	log.Warn("slack: unparsable envelope acknowledged", "envelope", req.EnvelopeID, "error", bad.Cause)
	s.ack(ctx, sm, req.EnvelopeID, log)
}

func (s *Socket) ack(ctx context.Context, sm *socketmode.Client, envelope string, log *slog.Logger) {
	if envelope == "" {
		return
	}
	if err := sm.AckCtx(ctx, envelope, nil); err != nil && ctx.Err() == nil {
		log.Warn("slack: ack failed (Slack redelivers the envelope)", "envelope", envelope, "error", err)
	}
}
