package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// DelegationConfig is fastagent.yaml's delegation: which agents this one
// may hand a sub-task to, and the bounds that stop runaway recursion.
type DelegationConfig struct {
	// Agents are the agents the delegate tool may name. The name "self"
	// (or any entry without a taskQueue) is this agent with a fresh
	// context; an entry with a taskQueue is the agent whose workers poll it.
	Agents map[string]DelegateAgent `yaml:"agents"`
	// MaxDepth bounds how deep delegations nest: 1 lets this agent
	// delegate but not its sub-agents (default 2).
	MaxDepth int `yaml:"maxDepth"`
	// MaxChildren bounds the delegations of one turn (default 4).
	MaxChildren int `yaml:"maxChildren"`
	// Timeout bounds one sub-agent's run (default 30m).
	Timeout Duration `yaml:"timeout"`
}

// DelegateAgent is one agent the delegate tool may name.
type DelegateAgent struct {
	// TaskQueue is where the agent's workers poll ("": this agent).
	TaskQueue string `yaml:"taskQueue"`
	// Description tells the model what the agent is good at.
	Description string `yaml:"description"`
}

// Delegation defaults and bounds.
const (
	DefaultDelegationDepth    = 2
	DefaultDelegationChildren = 4
	DefaultDelegationTimeout  = 30 * time.Minute
	maxDelegationDepth        = 5
	maxDelegationChildren     = 32
	// MaxDelegateTask bounds a task's size: it travels in workflow history.
	MaxDelegateTask = 16 << 10
)

var delegateName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,39}$`)

func (d DelegationConfig) validate() error {
	for name := range d.Agents {
		if !delegateName.MatchString(name) {
			return badKey(fmt.Sprintf("agent name %q: use 1-40 lowercase letters, digits, - or _", name), "delegation", "agents")
		}
	}
	if d.MaxDepth < 0 || d.MaxDepth > maxDelegationDepth {
		return badKey(fmt.Sprintf("%d is out of range 1..%d (unset: %d)", d.MaxDepth, maxDelegationDepth, DefaultDelegationDepth), "delegation", "maxDepth")
	}
	if d.MaxChildren < 0 || d.MaxChildren > maxDelegationChildren {
		return badKey(fmt.Sprintf("%d is out of range 1..%d (unset: %d)", d.MaxChildren, maxDelegationChildren, DefaultDelegationChildren), "delegation", "maxChildren")
	}
	if d.Timeout != 0 && time.Duration(d.Timeout) < time.Second {
		return badKey("must be at least 1s (unset: 30m)", "delegation", "timeout")
	}
	return nil
}

// Resolve turns a delegate call's arguments into the delegation to run,
// or says why the call cannot run (an error the model reads).
func (d DelegationConfig) Resolve(args json.RawMessage) (*agentloop.Delegation, string) {
	var a struct {
		Agent   string `json:"agent"`
		Task    string `json:"task"`
		Session string `json:"session"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, fmt.Sprintf(`delegate needs {"agent": "…", "task": "…"}: %v`, err)
	}
	target, ok := d.Agents[a.Agent]
	if !ok {
		return nil, fmt.Sprintf("No agent %q to delegate to; this agent may delegate to: %s.", a.Agent, strings.Join(sortedKeys(d.Agents), ", "))
	}
	if strings.TrimSpace(a.Task) == "" {
		return nil, "delegate needs a task: say what the sub-agent should do and what to answer with."
	}
	if a.Session != "" && !delegateName.MatchString(a.Session) {
		return nil, fmt.Sprintf("session %q: name a sub-session with 1-40 lowercase letters, digits, - or _ (or leave it out for a fresh one).", a.Session)
	}
	if len(a.Task) > MaxDelegateTask {
		return nil, fmt.Sprintf("The task is %d bytes; a delegated task may have at most %d. Say it shorter, or put the material in a file the sub-agent can read.", len(a.Task), MaxDelegateTask)
	}
	return &agentloop.Delegation{
		Agent:       a.Agent,
		TaskQueue:   target.TaskQueue,
		Task:        a.Task,
		Session:     a.Session,
		MaxDepth:    or(d.MaxDepth, DefaultDelegationDepth),
		MaxChildren: or(d.MaxChildren, DefaultDelegationChildren),
		Timeout:     orDuration(time.Duration(d.Timeout), DefaultDelegationTimeout),
	}, ""
}

func or(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

func orDuration(v, d time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return d
}

// delegateTool is the delegate tool's spec. The session workflow runs its
// calls as child workflows (agentloop.Call.Delegate); Run is never reached
// through a session, and says so if it is.
type delegateTool struct{ agents map[string]DelegateAgent }

func (t delegateTool) Spec() agent.ToolSpec {
	names := sortedKeys(t.agents)
	var list []string
	for _, n := range names {
		line := n
		if d := strings.TrimSpace(t.agents[n].Description); d != "" {
			line += ": " + d
		}
		if n == "self" && t.agents[n].TaskQueue == "" && t.agents[n].Description == "" {
			line += ": you, with a fresh context (for a self-contained sub-task)"
		}
		list = append(list, line)
	}
	enum, _ := json.Marshal(names)
	return agent.ToolSpec{
		Name: agentloop.DelegateTool,
		Description: "Hand a self-contained sub-task to another agent and get its answer as this call's result. " +
			"The sub-agent sees only the task, not this conversation: say everything it needs and what to answer with. " +
			"Several delegate calls in one reply run in parallel. Agents: " + strings.Join(list, "; ") + ".",
		Parameters: json.RawMessage(`{"type":"object","properties":{"agent":{"type":"string","enum":` + string(enum) +
			`,"description":"who does the sub-task"},"task":{"type":"string","description":"the sub-task, complete in itself"},` +
			`"session":{"type":"string","description":"optional: a name (lowercase) to keep a sub-session; a later delegation to the same agent and name continues its conversation"}},"required":["agent","task"]}`),
	}
}

func (delegateTool) Run(context.Context, agent.ToolCall) (agent.ToolResult, error) {
	return agent.ToolResult{IsError: true, Content: "delegate runs a sub-agent from a session; it cannot run here."}, nil
}

// Delegates reports whether the tool name is the built-in delegate (an
// authored tool of that name replaces it).
func (d *Definition) Delegates(name string) bool {
	if name != agentloop.DelegateTool {
		return false
	}
	for _, e := range d.Tools {
		if e.Tool.Spec().Name == name {
			return e.Origin == OriginBuiltin
		}
	}
	return false
}
