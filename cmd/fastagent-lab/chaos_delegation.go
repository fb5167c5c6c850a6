package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/lab/chaosreport"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// delegationKills runs the delegation trials: a turn delegates a sub-task
// whose sub-agent runs a side-effecting (non-idempotent) bash call, and
// the worker process is SIGKILLed while that call runs; another worker
// takes over. Each trial must end with exactly one answer, the
// sub-agent's workflow run once, the side effect at most once and the
// sub-agent told its outcome is unknown.
func (ch *chaos) delegationKills() error {
	e, err := ch.newProcEnv("retry:\n  heartbeat: 3s\ndelegation:\n  agents:\n    self: {}\n", 1)
	if err != nil {
		return err
	}
	defer e.close()
	var t chaosreport.Tally
	t.Row.Scenario = "worker SIGKILL while a sub-agent's (non-idempotent) tool runs"
	for i := 0; i < ch.f.trials; i++ {
		ch.prog.Logf("delegation: trial %d/%d", i+1, ch.f.trials)
		t.Add(e.delegationKillTrial(i))
	}
	ch.rows = append(ch.rows, t.Done())
	return nil
}

// delegationKillTrial runs one trial in a fresh session: a warm-up turn,
// then the delegating turn, killed once its sub-agent's bash call wrote
// its side effect.
func (e *procEnv) delegationKillTrial(i int) (res chaosreport.Trial) {
	session := fmt.Sprintf("deleg-kill-%s-%d", e.ch.run, i)
	side := filepath.Join(e.kit.Dir, session+".side")
	key := "key-" + session
	child := agentloop.DelegateSession(session, key, "d1")
	ms := e.kit.Model
	var notes []string
	defer func() { res.Note = strings.Join(notes, ", ") }()
	allOK := true
	check := func(r invokeResult, what string) {
		if !r.ok {
			allOK = false
			notes = append(notes, fmt.Sprintf("%s: %d terminals (%v) %s", what, r.n, r.err, lab.OneLine(lab.Describe(r.evs), 120)))
		}
		switch {
		case r.n == 0:
			res.Lost++
		case r.n > 1:
			res.Duplicates += r.n - 1
		}
	}
	warm := session + " warm up"
	ms.EnqueueFor(warm, modelserver.Reply{Text: []string{"ready"}})
	check(e.invoke(session, warm, "", nil), "warm-up")

	prompt := session + " hand it off"
	subKey := "SUB-" + session
	args, _ := json.Marshal(map[string]string{"agent": "self", "task": "do the risky part (" + subKey + ")"})
	ms.EnqueueFor(prompt,
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "d1", Name: agentloop.DelegateTool, Args: string(args)}}},
		modelserver.Reply{Text: []string{"all", " done"}})
	ms.EnqueueFor(subKey,
		modelserver.Reply{Text: []string{"Running it."}, ToolCalls: []modelserver.ToolCall{bashSide(side, 5)}},
		modelserver.Reply{Text: []string{"the sub-task is done"}})

	// The killer watches the sub-agent's own feed for its bash call.
	killed := make(chan string, 1)
	sub, err := e.bus.Subscribe(context.Background(), child, agentloop.DelegateTurn)
	if err != nil {
		notes = append(notes, "subscribe: "+err.Error())
		return res
	}
	defer sub.Close()
	go func() {
		for m := range sub.C() {
			if m.Kind != feed.KindEvent || m.Event == nil || m.Event.Type != agent.TypeToolStarted || m.Event.Name != "bash" {
				continue
			}
			waitFile(side, 30*time.Second)
			state := ""
			if _, err := e.replace(0); err != nil {
				state = "replace worker: " + err.Error()
			}
			killed <- state
			return
		}
		killed <- "the kill point never came"
	}()

	t0 := time.Now()
	r := e.invoke(session, prompt, key, nil)
	res.Took = time.Since(t0)
	check(r, "delegating turn")
	select {
	case s := <-killed:
		if s != "" {
			notes = append(notes, s)
		}
	case <-time.After(time.Minute):
		notes = append(notes, "the kill never happened")
	}

	res.OneTerminal = allOK && r.ok
	spec := r.ok && r.term.Type == agent.TypeCompleted
	if text := agent.AnswerText(r.evs); text != "all done" {
		spec = false
		notes = append(notes, fmt.Sprintf("client kept text %q", lab.OneLine(text, 60)))
	}
	ctx := context.Background()
	tr := lab.CheckTranscript(ctx, e.kit.Store, session, []string{warm, prompt}, true)
	res.Duplicates += tr.Duplicates
	res.Lost += tr.Missing
	if len(tr.Problems) > 0 {
		notes = append(notes, strings.Join(tr.Problems, "; "))
	}
	if !toolResultSays(ctx, e.kit, child, "unknown") {
		spec = false
		notes = append(notes, "the sub-agent's bash result after the kill does not say the outcome is unknown")
	}
	runs, err := e.ch.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = %q", workflows.WorkflowID(child))})
	switch {
	case err != nil:
		notes = append(notes, "list the sub-agent's runs: "+err.Error())
	case len(runs.GetExecutions()) != 1:
		res.Duplicates += max(len(runs.GetExecutions())-1, 0)
		notes = append(notes, fmt.Sprintf("the sub-agent's workflow ran %d times", len(runs.GetExecutions())))
	}
	n := countRuns(side)
	res.SideChecked = true
	res.SideOK = n <= 1
	if n > 1 {
		res.Duplicates++
		notes = append(notes, fmt.Sprintf("the sub-agent's side effect ran %d times", n))
	}
	if n == 0 {
		spec = false
		notes = append(notes, "the sub-agent's side effect never ran")
	}
	res.AsSpecified = spec && tr.OK()
	return res
}
