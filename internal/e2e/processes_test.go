package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/httpagent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// startIngressProcess runs `fastagent ingress` on a free port and waits for
// its /health.
func (e *env) startIngressProcess(t *testing.T) string {
	t.Helper()
	port, err := devserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e.startProcess(t, "ingress", "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitFor(t, 60*time.Second, "the ingress on "+base+" to become healthy", func() bool {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return base
}

// runningWorkerPID asks Temporal which worker process runs the session's
// current activity (worker identities are "<pid>@<host>@").
func (e *env) runningWorkerPID(t *testing.T, session string) int {
	t.Helper()
	var pid int
	waitFor(t, 30*time.Second, "a running activity in "+session, func() bool {
		d, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(session), "")
		if err != nil {
			return false
		}
		for _, pa := range d.GetPendingActivities() {
			if id := pa.GetLastWorkerIdentity(); id != "" {
				if p, err := strconv.Atoi(strings.SplitN(id, "@", 2)[0]); err == nil {
					pid = p
					return true
				}
			}
		}
		return false
	})
	return pid
}

// Production topology in processes: two workers and two ingresses against
// one Temporal server, NATS between them. A turn starts through ingress A;
// the worker running its model stream is SIGKILLed; the other worker
// finishes it; the SSE client on ingress A gets the deltas, a retrying event
// before the re-streamed text, and exactly one terminal.
func TestTwoWorkersTwoIngressesWorkerKilledMidStream(t *testing.T) {
	e := newProcessEnv(t)
	slow := make([]string, 20)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: slow, ChunkDelay: 250 * time.Millisecond},
		modelserver.Reply{Text: []string{"recovered", " answer"}},
	)
	workers := map[int]*proc{}
	for i := 0; i < 2; i++ {
		p := e.startWorkerProcess(t)
		workers[p.cmd.Process.Pid] = p
	}
	ingressA := e.startIngressProcess(t)
	ingressB := e.startIngressProcess(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := &httpagent.Agent{BaseURL: ingressA, Token: e2eToken}
	var evs []agent.Event
	killed := 0
	for ev := range client.Invoke(ctx, agent.Scope{Session: "two-by-two"}, agent.Prompt{Text: "stream slowly"}) {
		evs = append(evs, ev)
		if ev.Type == agent.TypeText && killed == 0 {
			killed = e.runningWorkerPID(t, "two-by-two")
			p, ok := workers[killed]
			if !ok {
				t.Fatalf("the activity runs on pid %d, not one of our workers %v", killed, workers)
			}
			p.kill(t)
		}
	}
	t.Logf("killed worker %d; events: %s", killed, describe(evs))
	term := agenttest.CheckTerminal(t, evs)
	if term.Type != agent.TypeCompleted {
		t.Fatalf("want completed, got %s", describe(evs))
	}
	sawText, sawRetry := false, false
	for _, ev := range evs {
		switch ev.Type {
		case agent.TypeText:
			if !sawRetry {
				sawText = true
			}
		case agent.TypeRetrying:
			if !sawText {
				t.Errorf("retrying before any text: %s", describe(evs))
			}
			sawRetry = true
		}
	}
	if !sawRetry {
		t.Errorf("no retrying event after the worker died mid-stream: %s", describe(evs))
	}
	if got := agenttest.TextAfterLastRetry(evs); got != "recovered answer" {
		t.Errorf("text after the retry = %q", got)
	}
	// The session is reachable through ingress B too (portable).
	res, err := agent.Collect((&httpagent.Agent{BaseURL: ingressB, Token: e2eToken}).Invoke(ctx, agent.Scope{Session: "two-by-two"}, agent.Prompt{Text: "and now?"}))
	if err != nil || res.Text == "" {
		t.Errorf("second turn through ingress B: %+v, %v", res, err)
	}
}
