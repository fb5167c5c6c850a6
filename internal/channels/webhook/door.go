package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// handOffTimeout bounds the Signal-With-Start of one request.
const handOffTimeout = 2500 * time.Millisecond

// Door is one endpoint's door.
type Door struct {
	name     string
	cfg      Config
	verifier Verifier
	mapping  *mapping
	maxBody  int64
	respond  string
	wait     time.Duration
	reply    *Replier
	secrets  []string
	// Now is the clock timestamps are checked against (nil: time.Now).
	Now func() time.Time
}

// Name is the endpoint's name.
func (d *Door) Name() string { return d.name }

// Kind implements channels.Door: "hook:<name>".
func (d *Door) Kind() string { return KindPrefix + d.name }

// Path implements channels.Door: "/hooks/<name>".
func (d *Door) Path() string { return PathPrefix + d.name }

// Scheme is the endpoint's verification scheme.
func (d *Door) Scheme() string { return d.cfg.Scheme }

// Respond is the endpoint's respond mode (async or wait).
func (d *Door) Respond() string { return d.respond }

// Verifier is the endpoint's verifier.
func (d *Door) Verifier() Verifier { return d.verifier }

func (d *Door) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// Verify implements channels.Door.
func (d *Door) Verify(r channels.Request) error {
	_, err := d.verifier.Verify(r.Header, r.Body, d.now())
	return err
}

// Accepted is the JSON body of a 202 (and of a 200 with the answer).
type Accepted struct {
	Session string `json:"session"`
	Turn    string `json:"turn"`
	// Events is where the turn's events can be followed, with an API token
	// (GET, server-sent events).
	Events string `json:"events"`
	// Status and Text are set when respond: wait got the answer in time.
	Status string `json:"status,omitempty"`
	Text   string `json:"text,omitempty"`
}

// Parse implements channels.Door: an event when: filters out is answered
// 204; a mapped one is one delivery, answered 202 with its turn key. An
// event the templates cannot map answers 422 and starts nothing.
func (d *Door) Parse(r channels.Request) (channels.Parsed, error) {
	id, err := d.verifier.Verify(r.Header, r.Body, d.now())
	if err != nil {
		return channels.Parsed{Answer: channels.Answer{Status: http.StatusUnauthorized}}, err
	}
	ev := newEvent(d.name, r.Header, r.Body, id)
	ok, err := d.mapping.match(ev)
	if err != nil || !ok {
		return channels.Parsed{Answer: channels.Answer{Status: http.StatusNoContent}}, err
	}
	session, prompt, key, err := d.mapping.turn(ev)
	if err != nil {
		return channels.Parsed{Answer: channels.Answer{Status: http.StatusUnprocessableEntity,
			ContentType: "text/plain; charset=utf-8", Body: []byte(err.Error() + "\n")}}, err
	}
	dl := channels.Delivery{Kind: d.Kind(), ID: key, Session: session, Prompt: agent.Prompt{Text: prompt}}
	if d.reply != nil {
		dl.Reply = &wire.Target{Chat: session, Message: dl.Key()}
	}
	body, _ := json.Marshal(accepted("", session, dl.Key()))
	return channels.Parsed{Deliveries: []channels.Delivery{dl},
		Answer: channels.Answer{Status: http.StatusAccepted, ContentType: "application/json", Body: append(body, '\n')}}, nil
}

// accepted is the answer for turn key of session; its events route starts
// at base (channels.APIBase).
func accepted(base, session, key string) Accepted {
	return Accepted{Session: session, Turn: key,
		Events: base + "/sessions/" + url.PathEscape(session) + "/turns/" + url.PathEscape(key) + "/events"}
}

// Handler serves the endpoint: cap the body (413), verify it (401), filter
// (204), map (422), Signal-With-Start the turn (503 when Temporal cannot be
// reached, so the sender retries; the retry is deduplicated), answer 202 —
// or, with respond: wait and att, the answer as JSON (200) when the turn
// ends within the bound. Nothing waits for a worker before the hand-off.
func (d *Door) Handler(c channels.Starter, taskQueue string, log *slog.Logger, att channels.Attacher) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, d.maxBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "cannot read the request body", http.StatusBadRequest)
			return
		}
		parsed, err := d.Parse(channels.Request{Header: r.Header, Body: body})
		ans := parsed.Answer
		if err != nil {
			if ans.Status == http.StatusUnauthorized {
				log.Warn("webhook: request refused", "kind", d.Kind(), "error", err)
				http.Error(w, "invalid signature", http.StatusUnauthorized)
				return
			}
			log.Warn("webhook: event not mapped", "kind", d.Kind(), "status", ans.Status, "error", err)
			parsed.Deliveries = nil
		}
		if len(parsed.Deliveries) > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), handOffTimeout)
			err := channels.Dispatch(ctx, c, taskQueue, parsed)
			cancel()
			if err != nil {
				log.Error("webhook: hand-off failed", "kind", d.Kind(), "error", err)
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			}
			dl := parsed.Deliveries[0]
			base := channels.APIBase(r.Context())
			if base != "" && ans.Status == http.StatusAccepted {
				body, _ := json.Marshal(accepted(base, dl.Session, dl.Key()))
				ans.Body = append(body, '\n')
			}
			if d.respond == RespondWait && att != nil {
				if res, ok := d.await(r.Context(), att, base, dl.Session, dl.Key()); ok {
					ans.Status, ans.Body = http.StatusOK, res
				}
			}
		}
		if ans.ContentType != "" {
			w.Header().Set("Content-Type", ans.ContentType)
		}
		w.WriteHeader(ans.Status)
		_, _ = w.Write(ans.Body)
	})
}

// await follows the turn until it ends or the bound passes; ok is false
// past the bound (the caller answers 202).
func (d *Door) await(ctx context.Context, att channels.Attacher, base, session, key string) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(ctx, d.wait)
	defer cancel()
	for {
		// The turn is known once the session workflow has taken the
		// signal, which needs a worker; until then Attach says no such turn.
		events, err := att.Attach(ctx, session, key)
		if err == nil {
			res, err := agent.Collect(events)
			out := accepted(base, session, key)
			var f *agent.Failure
			switch {
			case err == nil:
				out.Status, out.Text = agent.TypeCompleted, res.Text
			case errors.As(err, &f) && ctx.Err() == nil:
				out.Status, out.Text = agent.TypeFailed, f.Details
			default:
				return nil, false
			}
			b, _ := json.Marshal(out)
			return append(b, '\n'), true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Summary describes the endpoint for `fastagent info` and logs.
func (d *Door) Summary() string {
	s := fmt.Sprintf("scheme %s, respond %s", d.cfg.Scheme, d.respond)
	if d.reply != nil {
		s += ", reply " + d.reply.url
	}
	return s
}
