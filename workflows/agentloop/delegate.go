package agentloop

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"time"
)

// DelegateTool is the built-in tool through which an agent hands a
// sub-task to another agent, or to itself with a fresh context.
const DelegateTool = "delegate"

// DelegateTurn is the turn ID of a sub-agent's one turn.
const DelegateTurn = "delegate"

// Delegation is what the definition resolved for a delegate call: the
// sub-agent, where it runs and the bounds of the tree.
type Delegation struct {
	// Agent is the name the call used; TaskQueue is where that agent's
	// workers poll ("" for this agent itself).
	Agent     string `json:"agent"`
	TaskQueue string `json:"taskQueue,omitempty"`
	// Task is what the sub-agent is asked to do (its one turn's prompt).
	Task string `json:"task"`
	// Session, when set, names a sub-session of the agent that keeps its
	// context across delegations (""): a fresh session per sub-task).
	Session string `json:"session,omitempty"`
	// MaxDepth bounds how deep delegations may nest (1: sub-agents may
	// not delegate); MaxChildren the delegations of one turn; Timeout
	// bounds one sub-agent's run.
	MaxDepth    int           `json:"maxDepth"`
	MaxChildren int           `json:"maxChildren"`
	Timeout     time.Duration `json:"timeout"`
}

// AnswerRef names a stored answer: the assistant text of session between
// entry First (the prompt) and entry Leaf.
type AnswerRef struct {
	Session string `json:"session"`
	First   string `json:"first"`
	Leaf    string `json:"leaf"`
}

// DelegateSession is the session ID of the sub-agent a delegate call of a
// turn starts: derived from the parent session, the turn and the call, so
// a retried or replayed call names the same child and never starts a
// second one. Relays derive it the same way to show the child's progress.
func DelegateSession(session, turn, call string) string {
	sum := sha256.Sum256([]byte(turn + "\n" + call))
	return session + "/delegate-" + hex.EncodeToString(sum[:8])
}

// DelegateStore is where a delegate call's sub-agent keeps its transcript
// and its turn's key: the child's own session (DelegateSession) and turn
// DelegateTurn, or, for a named sub-session of agent, the session
// "<session>/<agent>:<named>", which later delegations continue, and a turn
// key derived from the delegating turn and call.
func DelegateStore(session, turn, call, agent, named string) (store, key string) {
	if named == "" {
		return DelegateSession(session, turn, call), DelegateTurn
	}
	sum := sha256.Sum256([]byte(turn + "\n" + call))
	return session + "/" + agent + ":" + named, DelegateTurn + "-" + hex.EncodeToString(sum[:8])
}

// subAgentTail matches the last part of a sub-agent's session ID:
// DelegateSession's "/delegate-<16 hex>" or DelegateStore's
// "/<agent>:<name>" (both names as the definition allows them).
var subAgentTail = regexp.MustCompile(`/(delegate-[0-9a-f]{16}|[a-z0-9][a-z0-9_-]{0,39}:[a-z0-9][a-z0-9_-]{0,39})$`)

// IsSubAgentSession reports whether session has the shape of a sub-agent's
// session (DelegateSession, DelegateStore): such a session belongs to the
// session that delegated to it, and no client may open or use it itself.
func IsSubAgentSession(session string) bool { return subAgentTail.MatchString(session) }
