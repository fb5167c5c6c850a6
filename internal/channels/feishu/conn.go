package feishu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// handTimeout bounds one event's hand-off, well inside the platform's 3 s.
const handTimeout = 2500 * time.Millisecond

// Conn is the long connection (transport: websocket) through the SDK's
// larkws client: the platform pushes events over an outbound websocket
// authenticated by App ID and Secret, so no public URL, token or Encrypt
// Key is needed. Each event is handed to Temporal and then ACKed; a failed
// hand-off is answered 500, so the platform pushes the event again. Card
// callbacks (approval clicks) arrive the same way and are answered with
// their toast.
//
// Shutdown is only as clean as the SDK allows: larkws.Client.Start blocks
// forever, ignores its context for the open socket and has no Close. When
// Run's context ends, Run returns at once, every later event is refused
// (500: the platform re-pushes it to a live connection) and the SDK can no
// longer reconnect (its endpoint request uses the cancelled context); the
// SDK's socket and goroutines stay until the process exits.
type Conn struct {
	Door      *Door
	AppID     string
	AppSecret string
	Log       *slog.Logger
}

// Run implements channels.Connector.
func (c *Conn) Run(ctx context.Context, hand func(context.Context, channels.Parsed) error, ready func()) error { //nolint:contextcheck // the SDK's websocket client keeps its own context
	log := c.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("kind", c.Door.Kind(), "transport", TransportWebsocket)
	if c.Door.Bot != nil {
		rctx, cancel := context.WithTimeout(ctx, botLookupTimeout)
		err := c.Door.Bot.Resolve(rctx)
		cancel()
		if err != nil {
			log.Warn("feishu: bot open_id unknown: group messages are refused (pushed again) until it is", "error", err)
		}
	}
	var closed atomic.Bool
	// handle hands one decoded event's chat message off (an error NACKs
	// the frame, so the platform pushes the event again).
	handle := func(hctx context.Context, m *wire.ChatMessage, err error) error {
		if errors.Is(err, channels.ErrRetryLater) {
			log.Warn("feishu: event refused for now; the platform will push it again", "error", err)
			return err
		}
		if err != nil {
			// Unreadable: acknowledge, as the webhook does.
			log.Warn("feishu: unreadable event acknowledged", "error", err)
			return nil
		}
		if m == nil {
			return nil
		}
		hctx, cancel := context.WithTimeout(hctx, handTimeout)
		defer cancel()
		if err := hand(hctx, channels.Parsed{Messages: []wire.ChatMessage{*m}}); err != nil {
			log.Error("feishu: hand-off failed; the platform will push again", "id", m.ID, "error", err)
			return fmt.Errorf("feishu: hand-off: %w", err)
		}
		return nil
	}
	d := dispatcher.NewEventDispatcher("", "").
		OnP2MessageReceiveV1(func(hctx context.Context, ev *larkim.P2MessageReceiveV1) error {
			if closed.Load() {
				return errors.New("feishu: connection is shutting down")
			}
			bctx, cancel := context.WithTimeout(hctx, botLookupTimeout)
			m, err := c.Door.Message(bctx, ev)
			cancel()
			return handle(hctx, m, err)
		}).
		OnP2MessageRecalledV1(func(hctx context.Context, ev *larkim.P2MessageRecalledV1) error {
			if closed.Load() {
				return errors.New("feishu: connection is shutting down")
			}
			m, err := c.Door.Recall(ev)
			return handle(hctx, m, err)
		}).
		OnP2CardActionTrigger(func(hctx context.Context, ev *callback.CardActionTriggerEvent) (*callback.CardActionTriggerResponse, error) {
			if closed.Load() {
				return nil, errors.New("feishu: connection is shutting down")
			}
			return c.click(hctx, log, hand, ev)
		})
	var once sync.Once
	lg := &connLogger{log: log, onConnect: func() { once.Do(ready) }}
	cli := larkws.NewClient(c.AppID, c.AppSecret,
		larkws.WithEventHandler(d),
		larkws.WithDomain(c.Door.Profile.BaseURL),
		larkws.WithLogger(lg),
		larkws.WithLogLevel(larkcore.LogLevelInfo))
	sdkCtx, stop := context.WithCancel(context.Background())
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- cli.Start(sdkCtx) }()
	select {
	case <-ctx.Done():
		closed.Store(true)
		lg.quiet.Store(true)
		log.Info("feishu: long connection closing; the SDK keeps its socket until the process exits")
		return nil
	case err := <-errc:
		// Start only returns on an error it does not retry (bad
		// credentials, connection limit).
		closed.Store(true)
		return fmt.Errorf("feishu: long connection: %w", err)
	}
}

// click hands a card callback's decision off and answers the click with
// its toast; a click that decides nothing is answered empty.
func (c *Conn) click(ctx context.Context, log *slog.Logger, hand func(context.Context, channels.Parsed) error,
	ev *callback.CardActionTriggerEvent) (*callback.CardActionTriggerResponse, error) {
	if stop, toast, err := c.Door.StopClick(ev); err != nil || toast != nil {
		if err != nil {
			log.Warn("feishu: unreadable stop click acknowledged", "error", err)
			return &callback.CardActionTriggerResponse{}, nil
		}
		if stop != nil {
			hctx, cancel := context.WithTimeout(ctx, handTimeout)
			defer cancel()
			if err := hand(hctx, channels.Parsed{Messages: []wire.ChatMessage{*stop}}); err != nil {
				log.Error("feishu: hand-off of a stop click failed", "id", stop.ID, "error", err)
				return nil, fmt.Errorf("feishu: hand-off: %w", err)
			}
		}
		return toast.Response(), nil
	}
	dec, toast, err := c.Door.Click(ev)
	switch {
	case err != nil:
		log.Warn("feishu: unreadable card callback acknowledged", "error", err)
		return &callback.CardActionTriggerResponse{}, nil
	case toast == nil:
		return &callback.CardActionTriggerResponse{}, nil
	case dec == nil:
		return toast.Response(), nil
	}
	hctx, cancel := context.WithTimeout(ctx, handTimeout)
	defer cancel()
	if err := hand(hctx, channels.Parsed{Decisions: []channels.Decision{*dec}}); err != nil {
		log.Error("feishu: hand-off of a decision failed", "id", dec.ID, "error", err)
		return nil, fmt.Errorf("feishu: hand-off: %w", err)
	}
	return toast.Response(), nil
}

// connLogger routes the ws client's log lines to slog and spots
// connections ("connected to …") for ready and reconnects.
type connLogger struct {
	log       *slog.Logger
	onConnect func()
	connects  atomic.Int64
	// quiet demotes every line to Debug once Run has returned: the SDK's
	// orphaned client keeps logging its failed reconnects.
	quiet atomic.Bool
}

var _ larkcore.Logger = (*connLogger)(nil)

func (l *connLogger) Debug(_ context.Context, args ...interface{}) {
	l.log.Debug(fmt.Sprint(args...))
}

func (l *connLogger) Info(_ context.Context, args ...interface{}) {
	msg := fmt.Sprint(args...)
	switch {
	case l.quiet.Load():
		l.log.Debug(msg)
	case strings.HasPrefix(msg, "connected to "):
		if n := l.connects.Add(1); n > 1 {
			l.log.Info("feishu: long connection reconnected", "connects", n)
		} else {
			l.log.Info("feishu: long connection connected")
		}
		l.onConnect()
	case strings.HasPrefix(msg, "disconnected"):
		l.log.Warn("feishu: long connection lost; reconnecting", "detail", msg)
	default:
		l.log.Info(msg)
	}
}

func (l *connLogger) Warn(_ context.Context, args ...interface{}) {
	l.at(slog.LevelWarn, args) //nolint:contextcheck // the SDK's logger interface hands a context we do not need
}

func (l *connLogger) Error(_ context.Context, args ...interface{}) {
	l.at(slog.LevelError, args) //nolint:contextcheck // the SDK's logger interface hands a context we do not need
}

func (l *connLogger) at(level slog.Level, args []interface{}) {
	if l.quiet.Load() {
		level = slog.LevelDebug
	}
	l.log.Log(context.Background(), level, fmt.Sprint(args...))
}
