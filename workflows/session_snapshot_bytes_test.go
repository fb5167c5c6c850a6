package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// payloadLimit is Temporal's default limit on one payload (the blob size
// error limit): a continue-as-new whose input is larger fails the session.
const payloadLimit = 2 << 20

// canInputBytes is the encoded size of the input a finished harness
// continued as new with, as Temporal measures it.
func canInputBytes(t *testing.T, h *harness) int {
	t.Helper()
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow error = %v, want continue-as-new", err)
	}
	n := 0
	for _, p := range can.Input.GetPayloads() {
		n += p.Size()
	}
	return n
}

// The queue's bound is a bound on what the snapshot weighs once encoded,
// as Temporal measures the continue-as-new input: a prompt of HTML (every
// "<", ">" and "&" is six bytes in JSON) counts at its encoded size, so a
// queue within MaxQueuedBytes of such prompts cannot carry a snapshot past
// the 2 MB payload limit, which would fail the session and lose its queue.
// Every delivery is carried or refused visibly.
func TestSessionCarriedQueueFitsThePayloadLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	heavyTasks(h)
	replies := withReplies(h)
	gate := make(chan struct{})
	gatedOn(h, "k0", gate)
	html := strings.Repeat("<br>", (100<<10)/4) // 100 KiB of markup: 350 KiB in JSON
	const n = 7
	h.at(ms, func() { h.deliver(delivery("k0", "first")) })
	h.when(func() bool { return h.modelStarted("k0", 1) }, func() {
		for i := 1; i <= n; i++ {
			h.deliver(delivery(fmt.Sprintf("k%d", i), html))
		}
		h.at(0, func() { close(gate) })
	})
	h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 1})
	in := continued(t, h)
	if got := canInputBytes(t, h); got > payloadLimit {
		t.Fatalf("continue-as-new input is %d bytes, past Temporal's %d-byte payload limit (%d turns carried)", got, payloadLimit, len(in.Snapshot.Queue))
	}
	refused := map[string]bool{}
	for _, r := range replies.calls() {
		if r.Busy {
			refused[r.Turn] = true
		}
	}
	carried := map[string]bool{}
	for _, q := range in.Snapshot.Queue {
		carried[q.Delivery.Key] = true
	}
	for i := 1; i <= n; i++ {
		k := fmt.Sprintf("k%d", i)
		if carried[k] == refused[k] {
			t.Errorf("%s: carried %v, refused %v; want exactly one", k, carried[k], refused[k])
		}
	}
}

// Failed replies keep their whole input for a resend, the turn's outcome
// included, whose details may quote a provider's error page: before
// continuing as new the snapshot sheds those bodies (the failure stays
// listed) rather than carry an input past the payload limit.
func TestSessionFailedRepliesFitThePayloadLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	heavyTasks(h)
	page := strings.Repeat("<br>", (100<<10)/4) // a 100 KiB error page
	h.model = func(context.Context, agentloop.ModelCall) (agentloop.ModelResult, error) {
		return agentloop.ModelResult{}, temporal.NewNonRetryableApplicationError("provider answered 502: "+page, "model", nil)
	}
	h.env.RegisterActivityWithOptions(func(context.Context, wire.ReplyInput) error {
		return temporal.NewNonRetryableApplicationError("receiver answered 503", "test", nil)
	}, activity.RegisterOptions{Name: workflows.ActivityChannelReply})
	h.env.RegisterActivityWithOptions(func(context.Context, wire.StreamInput) error { return nil },
		activity.RegisterOptions{Name: workflows.ActivityChannelStream})
	const n = 12
	h.at(ms, func() {
		for i := 1; i <= n; i++ {
			h.deliver(delivery(fmt.Sprintf("k%d", i), "hello"))
		}
	})
	h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: n})
	in := continued(t, h)
	if got := canInputBytes(t, h); got > payloadLimit {
		t.Fatalf("continue-as-new input is %d bytes, past Temporal's %d-byte payload limit", got, payloadLimit)
	}
	if len(in.Snapshot.FailedReplies) != n {
		t.Errorf("failed replies carried: %d, want %d (listed, if no longer resendable)", len(in.Snapshot.FailedReplies), n)
	}
}

// heavyTasks lets a workflow task of these tests (a dozen turns of 100 KiB
// payloads weighed encoded) run past the SDK's 1 s deadlock detector,
// which measures wall time: under -race on a busy machine it took 1–3 s.
func heavyTasks(h *harness) {
	h.withOptions(worker.Options{})
}
