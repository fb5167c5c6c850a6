package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/webhook"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/lab/chaosreport"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Secrets of the webhook row (Standard Webhooks whsec_ secrets; test values).
const (
	chaosHookSecret  = "whsec_Y2hhb3Mtd2ViaG9vay1zaWduaW5nLXNlY3JldA==" //nolint:gosec // G101: a test secret
	chaosReplySecret = "whsec_Y2hhb3Mtd2ViaG9vay1jYWxsYmFjay1zZWNyZXQ=" //nolint:gosec // G101: a test secret
)

// waitingEvents is how many other events wait behind the busy turn when the
// event under test arrives: more than the 8 a session once queued.
const waitingEvents = 10

// hookCallbacks receives reply callbacks, checking each one's signature.
type hookCallbacks struct {
	mu  sync.Mutex
	got map[string][]webhook.Callback // by webhook-id
	bad atomic.Int64
}

func (h *hookCallbacks) serve(v webhook.Verifier) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		id, err := v.Verify(r.Header, b, time.Now())
		var cb webhook.Callback
		if err == nil {
			err = json.Unmarshal(b, &cb)
		}
		if err != nil {
			h.bad.Add(1)
			http.Error(w, "bad callback", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.got[id] = append(h.got[id], cb)
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
}

func (h *hookCallbacks) of(id string) []webhook.Callback {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]webhook.Callback(nil), h.got[id]...)
}

// webhookRedelivery is the webhook row: in each trial a session is busy
// with a slow turn and ten more events wait behind it; then the event under
// test arrives and is redelivered three times (re-signed, as senders
// retry) while the session is still busy. It must be one turn, and one
// callback carrying the real answer (the stored one) — never a busy notice
// standing in for it — and every waiting event is answered once.
func (ch *chaos) webhookRedelivery() error {
	kit, err := lab.NewKit()
	if err != nil {
		return err
	}
	defer kit.Close()
	bus := feed.NewInProcess()
	defer bus.Close()
	queue := lab.NewQueue("webhook")
	verify, err := webhook.NewStandard([]string{chaosReplySecret}, time.Minute)
	if err != nil {
		return err
	}
	cbs := &hookCallbacks{got: map[string][]webhook.Callback{}}
	recv := httptest.NewServer(cbs.serve(verify))
	defer recv.Close()
	name := "chaos" + ch.run
	yaml := "scheme: standard\nsecretEnv: HOOK_SECRET\nsession: 'hook:" + name + ":{{.body.session}}'\nprompt: '{{.body.text}}'\n" +
		"reply:\n  url: " + recv.URL + "\n  secretEnv: HOOK_REPLY_SECRET\n  allowPrivate: true\n"
	getenv := func(k string) string {
		return map[string]string{"HOOK_SECRET": chaosHookSecret, "HOOK_REPLY_SECRET": chaosReplySecret}[k]
	}
	hook, err := webhook.New(name, []byte(yaml), getenv)
	if err != nil {
		return err
	}
	w, err := lab.StartWorker(ch.c, kit, bus, queue, func(_ *serve.Config, w *serve.Components) { w.Repliers = append(w.Repliers, hook.Replier) })
	if err != nil {
		return err
	}
	defer w.Stop()
	door := httptest.NewServer(hook.Door.(channels.Served).Handler(ch.c, queue, lab.QuietLogger(), nil))
	defer door.Close()

	var t chaosreport.Tally
	t.Row.Scenario = "webhook: redelivery during a busy turn"
	var mu sync.Mutex
	var wg sync.WaitGroup
	var done atomic.Int64
	for i := 0; i < ch.f.trials; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The endpoint's sessions are its own: hook:<name>:<what the event names>.
			session := fmt.Sprintf("hook:%s:chaos-%d", name, i)
			r := ch.webhookTrial(kit, door.URL, name, session, cbs)
			_ = ch.c.TerminateWorkflow(context.Background(), workflows.WorkflowID(session), "", "chaos trial over")
			mu.Lock()
			t.Add(r)
			mu.Unlock()
			ch.prog.Printf("webhook: %d/%d trials", done.Add(1), ch.f.trials)
		}()
	}
	wg.Wait()
	extra := fmt.Sprintf("%d events waited behind the busy turn; the event under test sent 4 times", waitingEvents)
	if n := cbs.bad.Load(); n > 0 {
		extra += fmt.Sprintf("; %d callbacks failed their signature check", n)
	}
	ch.rows = append(ch.rows, t.Done(extra))
	return nil
}

func (ch *chaos) webhookTrial(kit *lab.Kit, door, name, session string, cbs *hookCallbacks) (res chaosreport.Trial) {
	var notes []string
	defer func() { res.Note = strings.Join(notes, ", ") }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	send := func(id, text string) error {
		body, _ := json.Marshal(map[string]string{"session": strings.TrimPrefix(session, "hook:"+name+":"), "text": text})
		h, err := webhook.SignStandard([]string{chaosHookSecret}, id, time.Now(), body)
		if err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, door, bytes.NewReader(body))
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("event %s answered %s", id, resp.Status)
		}
		return nil
	}
	busy, probe := session+" busy turn", session+" the event under test"
	slow := make([]string, 12)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	kit.Model.EnqueueFor(busy, modelserver.Reply{Text: slow, ChunkDelay: 250 * time.Millisecond})
	kit.Model.EnqueueFor(probe, modelserver.Reply{Text: []string{"the real", " answer"}})
	key := func(id string) string { return webhook.KindPrefix + name + ":" + id }
	ids := []string{session + "-busy"}
	if err := send(ids[0], busy); err != nil {
		notes = append(notes, err.Error())
		return res
	}
	// Busy: its model stream has started (and takes 3 s).
	for !modelSaw(kit, busy) {
		if ctx.Err() != nil {
			notes = append(notes, "the busy turn never reached the model")
			return res
		}
		time.Sleep(20 * time.Millisecond)
	}
	for j := range waitingEvents {
		id := fmt.Sprintf("%s-wait-%d", session, j)
		ids = append(ids, id)
		if err := send(id, fmt.Sprintf("%s waiting event %d", session, j)); err != nil {
			notes = append(notes, err.Error())
			return res
		}
	}
	probeID := session + "-probe"
	ids = append(ids, probeID)
	t0 := time.Now()
	for range 4 {
		if err := send(probeID, probe); err != nil {
			notes = append(notes, err.Error())
			return res
		}
	}
	if !modelBusyWith(kit, busy) {
		notes = append(notes, "the busy turn ended before the redeliveries (not a redelivery during a busy turn)")
	}
	for !allCalledBack(cbs, ids, key) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	res.Took = time.Since(t0)
	for _, id := range ids {
		switch n := len(cbs.of(key(id))); {
		case n == 0:
			res.Lost++
		case n > 1:
			res.Duplicates += n - 1
		}
	}
	turns := 0
	for _, r := range kit.Model.Requests() {
		if r.LastUserText() == probe {
			turns++
		}
	}
	switch {
	case turns == 0:
		res.Lost++
		notes = append(notes, "the event under test never reached the model")
	case turns > 1:
		res.Duplicates += turns - 1
		notes = append(notes, fmt.Sprintf("the event under test ran %d times", turns))
	}
	got := cbs.of(key(probeID))
	res.OneTerminal = len(got) == 1
	want := storedAnswer(ctx, kit, session, key(probeID))
	spec := res.OneTerminal && turns == 1 && res.Lost == 0 && res.Duplicates == 0
	if len(got) == 1 && (got[0].Status != agent.TypeCompleted || got[0].Text != want || want != "the real answer") {
		spec = false
		notes = append(notes, fmt.Sprintf("callback %q (%s %s), want the stored answer %q", got[0].Text, got[0].Status, got[0].Code, want))
	}
	res.AsSpecified = spec
	return res
}

// modelSaw reports whether the model got a request whose prompt is text.
func modelSaw(kit *lab.Kit, text string) bool {
	for _, r := range kit.Model.Requests() {
		if r.LastUserText() == text {
			return true
		}
	}
	return false
}

// modelBusyWith reports whether the model is still streaming the reply to
// text (its request not done yet).
func modelBusyWith(kit *lab.Kit, text string) bool {
	for _, r := range kit.Model.Requests() {
		if r.LastUserText() == text && r.Done.IsZero() {
			return true
		}
	}
	return false
}

func allCalledBack(cbs *hookCallbacks, ids []string, key func(string) string) bool {
	for _, id := range ids {
		if len(cbs.of(key(id))) == 0 {
			return false
		}
	}
	return true
}

// storedAnswer is the stored answer of turn key in session ("" when there
// is none yet).
func storedAnswer(ctx context.Context, kit *lab.Kit, session, key string) string {
	rec, err := kit.Store.Turn(ctx, session, key)
	if err != nil {
		return ""
	}
	var out agentloop.Outcome
	if json.Unmarshal(rec.Outcome, &out) != nil {
		return ""
	}
	steps, err := relay.StoredSteps(ctx, kit.Store, session, out)
	if err != nil {
		return ""
	}
	return strings.Join(steps, "\n\n")
}
