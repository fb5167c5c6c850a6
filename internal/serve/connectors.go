package serve

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/fastagent/fastagent/internal/channels"
)

// RunConnectors runs the long connection of every channel that has one
// (Channel.Conn) until ctx ends, handing each event to Temporal with
// channels.Dispatch. ready is called once every connection has first
// connected — at once when there are none — so /health stays 503 until
// then. The returned channel receives the error of the first connection
// that stops on its own before ctx ended.
func RunConnectors(ctx context.Context, chans []*channels.Channel, c channels.Starter, taskQueue string,
	ready func(), log *slog.Logger) <-chan error {
	errc := make(chan error, 1)
	var conns []*channels.Channel
	for _, ch := range chans {
		if ch.Conn != nil {
			conns = append(conns, ch)
		}
	}
	if len(conns) == 0 {
		ready()
		return errc
	}
	var mu sync.Mutex
	pending := len(conns)
	hand := func(ctx context.Context, p channels.Parsed) error { return channels.Dispatch(ctx, c, taskQueue, p) }
	for _, ch := range conns {
		kind := ch.Door.Kind()
		var once sync.Once
		connected := func() {
			once.Do(func() {
				mu.Lock()
				pending--
				last := pending == 0
				mu.Unlock()
				log.Info("channel connected", "kind", kind, "file", ch.File)
				if last {
					ready()
				}
			})
		}
		go func() {
			err := ch.Conn.Run(ctx, hand, connected)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				err = fmt.Errorf("channel %s: long connection closed", kind)
			} else {
				err = fmt.Errorf("channel %s: %w", kind, err)
			}
			log.Error("channel long connection stopped", "kind", kind, "error", err)
			select {
			case errc <- err:
			default:
			}
		}()
	}
	return errc
}
