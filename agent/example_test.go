package agent_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/fastagent/fastagent/agent"
)

// An Agent is anything that turns a prompt into a stream of events ending
// in exactly one terminal event. This one echoes the prompt word by word.
func ExampleAgentFunc() {
	echo := agent.AgentFunc(func(ctx context.Context, scope agent.Scope, prompt agent.Prompt) iter.Seq[agent.Event] {
		return func(yield func(agent.Event) bool) {
			for i, w := range strings.Fields(prompt.Text) {
				if i > 0 && !yield(agent.Text(" ")) {
					return // the consumer broke off: stop, no terminal owed
				}
				if !yield(agent.Text(w)) {
					return
				}
			}
			yield(agent.Completed(nil))
		}
	})

	for ev := range echo.Invoke(context.Background(), agent.Scope{Session: "s1"}, agent.Prompt{Text: "hello durable world"}) {
		if ev.IsTerminal() {
			fmt.Println("terminal:", ev.Type)
			continue
		}
		fmt.Printf("%s %q\n", ev.Type, ev.Delta)
	}
	// Output:
	// text "hello"
	// text " "
	// text "durable"
	// text " "
	// text "world"
	// terminal: completed
}

// Collect consumes a whole turn: the answer on completed, a *Failure with
// the contract's code on failed. A retrying event drops the text of the
// step it restarts, so the answer holds each step's text once.
func ExampleCollect() {
	flaky := agent.AgentFunc(func(context.Context, agent.Scope, agent.Prompt) iter.Seq[agent.Event] {
		return func(yield func(agent.Event) bool) {
			part := agent.Text("Half an ans")
			part.Step = 1
			retry := agent.Event{Type: agent.TypeRetrying, Step: 1, Attempt: 2, MaxAttempts: 6, Reason: "stream cut"}
			whole := agent.Text("The whole answer.")
			whole.Step = 1
			for _, ev := range []agent.Event{part, retry, whole, agent.Completed(nil)} {
				if !yield(ev) {
					return
				}
			}
		}
	})
	res, err := agent.Collect(flaky.Invoke(context.Background(), agent.Scope{Session: "s1"}, agent.Prompt{Text: "hi"}))
	fmt.Printf("%q %v\n", res.Text, err)

	busy := agent.AgentFunc(func(context.Context, agent.Scope, agent.Prompt) iter.Seq[agent.Event] {
		return func(yield func(agent.Event) bool) {
			yield(agent.Failed("a turn is already running", true, agent.CodeSessionBusy))
		}
	})
	_, err = agent.Collect(busy.Invoke(context.Background(), agent.Scope{Session: "s1"}, agent.Prompt{Text: "hi"}))
	var f *agent.Failure
	if errors.As(err, &f) {
		fmt.Println(f.Code, f.Retryable)
	}
	// Output:
	// "The whole answer." <nil>
	// session_busy true
}
