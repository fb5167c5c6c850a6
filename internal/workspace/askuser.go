package workspace

import (
	"context"
	"encoding/json"

	"github.com/fastagent/fastagent/agent"
)

// AskUserName is the built-in tool askUser: true adds: the model asks the
// person it talks with a question and the session waits for the answer.
const AskUserName = "ask_user"

// askUserTool is ask_user's spec. The session workflow answers its calls
// from the person's answer (agentloop.Call.Ask); Run is never reached
// through a session, and says so if it is.
type askUserTool struct{}

func (askUserTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: AskUserName,
		Description: "Ask the person you are talking with a question and wait for their answer, which is this call's result. " +
			"Use it when you cannot go on well without their input (a choice, a missing detail); " +
			"ask one clear question. If no answer comes in time, the result says so.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string","description":"the question, as the person will read it"}},"required":["question"]}`),
		Sequential: true,
	}
}

func (askUserTool) Run(context.Context, agent.ToolCall) (agent.ToolResult, error) {
	return agent.ToolResult{IsError: true, Content: "ask_user is answered by the person in a session; it cannot run here."}, nil
}

// AskUser reports whether the tool name is the built-in ask_user (an
// authored tool of that name replaces it).
func (d *Definition) AskUser(name string) bool {
	if name != AskUserName {
		return false
	}
	for _, e := range d.Tools {
		if e.Tool.Spec().Name == name {
			return e.Origin == OriginBuiltin
		}
	}
	return false
}
