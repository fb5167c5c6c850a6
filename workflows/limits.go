package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// DayUsage is a session's token usage on one UTC day.
type DayUsage struct {
	// Day is the UTC date (2006-01-02) the usage counts for.
	Day   string      `json:"day"`
	Usage agent.Usage `json:"usage"`
}

const dayLayout = "2006-01-02"

// addDayUsage counts a finished turn's tokens against today.
func (s *session) addDayUsage(ctx workflow.Context, u agent.Usage) {
	day := workflow.Now(ctx).UTC().Format(dayLayout)
	if s.snap.Today.Day != day {
		s.snap.Today = DayUsage{Day: day}
	}
	s.snap.Today.Usage.Add(u)
}

// refuseOverDay refuses a turn, without running it, once the session used
// its limits.sessionTokensPerDay today. The check reads only the definition's
// settings and the usage already in the session's state, so histories
// recorded before limits existed (no limits in any result) replay the same.
func (s *session) refuseOverDay(ctx workflow.Context, t *pendingTurn) (agentloop.Outcome, bool) {
	limit := s.snap.Loop.Settings.Limits.SessionTokensPerDay
	day := workflow.Now(ctx).UTC().Format(dayLayout)
	if limit <= 0 || s.snap.Today.Day != day || s.snap.Today.Usage.Tokens() < limit {
		return agentloop.Outcome{}, false
	}
	f := agentloop.LimitFailure(fmt.Sprintf("the session used %d tokens today (UTC), reaching its daily budget of %d",
		s.snap.Today.Usage.Tokens(), limit), agentloop.KeySessionTokensPerDay)
	return agentloop.Outcome{Turn: t.id, Status: agent.TypeFailed, Details: f.Details, Code: f.Code}, true
}

// waitingApproval reports whether a tool call of the running turn still
// waits for a human: a decision or an answer.
func (s *session) waitingApproval() bool {
	for _, a := range s.approvals {
		if !a.decided {
			return true
		}
	}
	for _, q := range s.questions {
		if !q.answered {
			return true
		}
	}
	return false
}
