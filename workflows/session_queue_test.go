package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Names of the metrics the session reports from workflow code (literal, so
// that a renamed constant fails these tests).
const (
	refusedMetric      = "fastagent_turns_refused_total"
	replyFailureMetric = "fastagent_channel_replies_failed_total"
)

// counted is a client.MetricsHandler that keeps counter totals by name and
// tag values, for the metrics workflow code reports.
type counted struct {
	tags   map[string]string
	totals *map[string]int64
}

func newCounted() *counted {
	m := map[string]int64{}
	return &counted{totals: &m}
}

func (c *counted) WithTags(tags map[string]string) client.MetricsHandler {
	merged := maps.Clone(c.tags)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, tags)
	return &counted{tags: merged, totals: c.totals}
}

// key names a counter by name and the tags given (sorted), leaving out the
// SDK's own (namespace, task queue, workflow type).
func (c *counted) key(name string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c.tags)) {
		switch k {
		case "namespace", "task_queue", "workflow_type", "activity_type":
			continue
		}
		parts = append(parts, k+"="+c.tags[k])
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

var countedMu sync.Mutex

func (c *counted) Counter(name string) client.MetricsCounter {
	k := c.key(name)
	return counterOf(func(d int64) {
		countedMu.Lock()
		defer countedMu.Unlock()
		(*c.totals)[k] += d
	})
}

func (c *counted) Gauge(string) client.MetricsGauge { return gaugeOf(func(float64) {}) }
func (c *counted) Timer(string) client.MetricsTimer { return timerOf(func(time.Duration) {}) }

func (c *counted) total(key string) int64 {
	countedMu.Lock()
	defer countedMu.Unlock()
	return (*c.totals)[key]
}

type counterOf func(int64)

func (f counterOf) Inc(d int64) { f(d) }

type gaugeOf func(float64)

func (f gaugeOf) Update(v float64) { f(v) }

type timerOf func(time.Duration)

func (f timerOf) Record(d time.Duration) { f(d) }

// newCountingHarness is a harness whose workflow metrics land in the
// returned counters.
func newCountingHarness(t *testing.T) (*harness, *counted) {
	t.Helper()
	m := newCounted()
	return newHarnessWith(t, func(s *testsuite.WorkflowTestSuite) { s.SetMetricsHandler(m) }), m
}

// gatedOn makes the model fake wait for gate on turn's calls.
func gatedOn(h *harness, turn string, gate <-chan struct{}) {
	h.model = func(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Turn == turn {
			select {
			case <-gate:
			case <-ctx.Done():
				return agentloop.ModelResult{}, ctx.Err()
			case <-time.After(waitLimit):
				return agentloop.ModelResult{}, errors.New("the gate was never opened")
			}
		}
		return reply(call), nil
	}
}

// continued is the input of the run a finished harness continued as new
// into.
func continued(t *testing.T, h *harness) workflows.SessionInput {
	t.Helper()
	err := h.env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("workflow error = %v, want continue-as-new", err)
	}
	var in workflows.SessionInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
		t.Fatalf("decode continue-as-new input: %v", err)
	}
	return in
}

// The queue of a session keeps every delivered message: 40 deliveries that
// arrive while a turn runs all become turns, in order, each answered, and
// nobody gets a busy notice (the queue of 8 used to drop 32 of them with a
// log line).
func TestSessionDeliveriesAllKept(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	replies := withReplies(h)
	gate := make(chan struct{})
	gatedOn(h, "k0", gate)
	const n = 40
	h.at(ms, func() { h.deliver(delivery("k0", "first")) })
	h.when(func() bool { return h.modelStarted("k0", 1) }, func() {
		for i := 1; i <= n; i++ {
			h.deliver(delivery(fmt.Sprintf("k%d", i), fmt.Sprintf("event %d", i)))
		}
		h.at(0, func() { close(gate) })
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	var want []string
	want = append(want, "first")
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("event %d", i))
	}
	equalSlice(t, "prompts the model saw", h.prompts(), want)
	busy := 0
	for _, r := range replies.calls() {
		if r.Busy {
			busy++
		}
	}
	equal(t, "busy notices", busy, 0)
	equal(t, "replies", len(replies.calls()), n+1)
}

// Continue-as-new no longer waits for delivered turns to drain: they are
// carried, in order, in the snapshot, and the next run serves them.
func TestSessionDeliveriesCarriedAcrossContinueAsNew(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	replies := withReplies(h)
	gate := make(chan struct{})
	gatedOn(h, "k0", gate)
	h.at(ms, func() { h.deliver(delivery("k0", "event 0")) })
	h.when(func() bool { return h.modelStarted("k0", 1) }, func() {
		for i := 1; i <= 10; i++ {
			h.deliver(delivery(fmt.Sprintf("k%d", i), fmt.Sprintf("event %d", i)))
		}
		h.at(0, func() { close(gate) })
	})
	h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 2})
	in := continued(t, h)
	equalSlice(t, "prompts of the first run", h.prompts(), []string{"event 0", "event 1"})
	equal(t, "replies of the first run", len(replies.calls()), 2)

	next := newHarness(t)
	nextReplies := withReplies(next)
	next.run(in)
	var want []string
	for i := 2; i <= 10; i++ {
		want = append(want, fmt.Sprintf("event %d", i))
	}
	// TurnsPerRun 2: the second run serves two and carries the rest on.
	equalSlice(t, "prompts of the second run", next.prompts(), want[:2])
	for _, r := range nextReplies.calls() {
		if r.Busy {
			t.Errorf("busy notice for %s", r.Turn)
		}
	}
	third := newHarness(t)
	third.run(workflows.SessionInput{Session: "s1", Snapshot: continued(t, next).Snapshot})
	third.requireCancelled()
	equalSlice(t, "prompts of the third run", third.prompts(), want[2:])
}

// Past the queue's byte bound a delivery is refused visibly: the sender
// gets a busy notice carrying the refusal, the key is recorded as refused
// (a redelivery gets the same answer, not a second notice nor a turn), and
// the refusal is counted.
func TestSessionDeliveryRefusedPastTheBound(t *testing.T) {
	t.Parallel()
	h, metrics := newCountingHarness(t)
	replies := withReplies(h)
	gate := make(chan struct{})
	gatedOn(h, "k0", gate)
	big := strings.Repeat("x", 200<<10)
	h.at(ms, func() { h.deliver(delivery("k0", "first")) })
	h.when(func() bool { return h.modelStarted("k0", 1) }, func() {
		for i := 1; i <= 6; i++ {
			h.deliver(delivery(fmt.Sprintf("k%d", i), big))
		}
	})
	h.when(func() bool { return len(replies.calls()) >= 3 }, func() {
		h.deliver(delivery("k5", big)) // a redelivery of a refused key
		h.at(0, func() { close(gate) })
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	equal(t, "turns run", len(h.prompts()), 4) // k0 and three of 200 KiB
	var busy []string
	for _, r := range replies.calls() {
		if r.Busy {
			busy = append(busy, r.Turn)
			equal(t, r.Turn+" refusal code", r.Outcome.Code, agent.CodeSessionBusy)
			contains(t, r.Turn+" refusal", r.Outcome.Details, "refused")
		}
	}
	slices.Sort(busy)
	equalSlice(t, "busy notices", busy, []string{"k4", "k5", "k6"})
	recorded := map[string]string{}
	for _, r := range h.recordCalls() {
		recorded[r.Key] = r.Outcome.Code
	}
	for _, k := range []string{"k4", "k5", "k6"} {
		equal(t, k+" recorded as", recorded[k], agent.CodeSessionBusy)
	}
	equal(t, "refusals counted", metrics.total(refusedMetric+"{reason=queue_full,via=deliver}"), int64(3))
}

// A deliver signal without a key, or with a key of the session's own
// namespace, is refused visibly: nothing runs, and it is counted.
func TestSessionDeliverBadKeysRefused(t *testing.T) {
	t.Parallel()
	h, metrics := newCountingHarness(t)
	replies := withReplies(h)
	h.at(ms, func() {
		h.deliver(workflows.Delivery{Prompt: agent.Prompt{Text: "no key"}})
		h.deliver(workflows.Delivery{Key: workflows.InternalKeyPrefix + "steer:x", Prompt: agent.Prompt{Text: "internal"}})
		h.deliver(workflows.Delivery{Key: "ok", Prompt: agent.Prompt{Text: "fine"}})
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	equalSlice(t, "prompts the model saw", h.prompts(), []string{"fine"})
	equal(t, "replies", len(replies.calls()), 0)
	equal(t, "no key counted", metrics.total(refusedMetric+"{reason=no_key,via=deliver}"), int64(1))
	equal(t, "internal key counted", metrics.total(refusedMetric+"{reason=internal_key,via=deliver}"), int64(1))
}

// A channel reply that fails after its retries is reported — counted, and
// listed in the session's state with its error — and can be sent again
// (UpdateResend), which takes it off the list once it is sent.
func TestSessionFailedReplyReportedAndResent(t *testing.T) {
	t.Parallel()
	h, metrics := newCountingHarness(t)
	var mu sync.Mutex
	var sent []wire.ReplyInput
	failing := true
	h.env.RegisterActivityWithOptions(func(_ context.Context, in wire.ReplyInput) error {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, in)
		if failing {
			return temporal.NewNonRetryableApplicationError("webhook reply: https://receiver.example answered 503", "test", nil)
		}
		return nil
	}, activity.RegisterOptions{Name: workflows.ActivityChannelReply})
	h.env.RegisterActivityWithOptions(func(context.Context, wire.StreamInput) error { return nil },
		activity.RegisterOptions{Name: workflows.ActivityChannelStream})
	h.at(ms, func() { h.deliver(delivery("d1", "hello")) })
	var failed, after workflows.SessionView
	h.at(time.Hour, func() {
		failed = h.state()
		mu.Lock()
		failing = false
		mu.Unlock()
	})
	unknown := h.send(time.Hour+time.Second, workflows.UpdateResend, "r0", workflows.ResendRequest{Turn: "nope"})
	resend := h.send(time.Hour+2*time.Second, workflows.UpdateResend, "r1", workflows.ResendRequest{Turn: "d1"})
	h.at(2*time.Hour, func() { after = h.state() })
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	if len(failed.FailedReplies) != 1 || failed.FailedReplies[0].Turn != "d1" || failed.FailedReplies[0].Kind != "slack" ||
		!strings.Contains(failed.FailedReplies[0].Error, "answered 503") {
		t.Errorf("failed replies %+v, want d1's, with its error", failed.FailedReplies)
	}
	equal(t, "failures counted", metrics.total(replyFailureMetric+"{channel=slack}"), int64(1))
	h.requireRejected(unknown, agent.CodeNotFound)
	h.requireOK(resend, "resend")
	equal(t, "failed replies after the resend", len(after.FailedReplies), 0)
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 2 || sent[1].Turn != "d1" || sent[1].Ref != sent[0].Ref || sent[1].Outcome.Status != agent.TypeCompleted {
		t.Errorf("replies %+v, want d1's twice, the same", sent)
	}
}

// One delivery larger than the queue's bound is refused even by an idle
// session: it could not be carried across continue-as-new.
func TestSessionDeliveryTooLargeRefused(t *testing.T) {
	t.Parallel()
	h, metrics := newCountingHarness(t)
	replies := withReplies(h)
	h.at(ms, func() { h.deliver(delivery("huge", strings.Repeat("x", workflows.MaxQueuedBytes+1))) })
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	equal(t, "turns run", len(h.prompts()), 0)
	got := replies.calls()
	if len(got) != 1 || !got[0].Busy || !strings.Contains(got[0].Outcome.Details, "more than the 768 KiB") {
		t.Errorf("replies %+v, want one busy reply saying it is too large", got)
	}
	equal(t, "refusal counted", metrics.total(refusedMetric+"{reason=too_large,via=deliver}"), int64(1))
}

// Failed busy notices do not push failed answers off the session's list:
// a receiver down for a while fails both, and refusals can be many; the
// answers stay listed, and resendable, while the list drops busy notices
// first.
func TestSessionFailedAnswersOutlastFailedBusyNotices(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.env.RegisterActivityWithOptions(func(context.Context, wire.ReplyInput) error {
		return temporal.NewNonRetryableApplicationError("receiver answered 503", "test", nil)
	}, activity.RegisterOptions{Name: workflows.ActivityChannelReply})
	h.env.RegisterActivityWithOptions(func(context.Context, wire.StreamInput) error { return nil },
		activity.RegisterOptions{Name: workflows.ActivityChannelStream})
	gate := make(chan struct{})
	gatedOn(h, "a3", gate)
	big := strings.Repeat("x", 190<<10)
	h.at(ms, func() {
		for i := 1; i <= 3; i++ {
			h.deliver(delivery(fmt.Sprintf("a%d", i), "hello"))
		}
	})
	h.when(func() bool { return h.modelStarted("a3", 1) }, func() {
		for i := 1; i <= 4; i++ {
			h.deliver(delivery(fmt.Sprintf("k%d", i), big)) // the queue is full
		}
		for i := 1; i <= 25; i++ {
			h.deliver(delivery(fmt.Sprintf("r%d", i), strings.Repeat("y", 10<<10))) // refused: each busy notice fails
		}
		h.at(0, func() { close(gate) })
	})
	var view workflows.SessionView
	h.at(time.Hour, func() { view = h.state() })
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	listed := map[string]bool{}
	var turns []string
	for _, f := range view.FailedReplies {
		listed[f.Turn] = true
		turns = append(turns, f.Turn)
	}
	for _, k := range []string{"a1", "a2", "a3", "k1", "k2", "k3", "k4"} {
		if !listed[k] {
			t.Errorf("the failed answer of %s is no longer listed (listed: %v)", k, turns)
		}
	}
}
