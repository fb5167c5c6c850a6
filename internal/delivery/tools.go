package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/tools"
)

// Names of the tools.
const (
	SendMessageName = "send_message"
	SendFileName    = "send_file"
)

// MaxFileBytes bounds a file send_file sends.
const MaxFileBytes = 50 << 20

// MaxTextBytes bounds a message send_message sends.
const MaxTextBytes = 64 << 10

// Env is what a send needs from the runtime, put in the tool call's
// context by the Tool.Execute activity: the channels' senders, the store
// references are kept in, and the call's key.
type Env struct {
	Senders Senders
	Refs    Refs
	Session string
	// Key identifies the call (its session's result entry): a retried
	// call has the same key.
	Key string
}

type envKey struct{}

// WithEnv attaches a tool call's Env to ctx.
func WithEnv(ctx context.Context, e Env) context.Context {
	return context.WithValue(ctx, envKey{}, e)
}

func envFrom(ctx context.Context) (Env, bool) {
	e, ok := ctx.Value(envKey{}).(Env)
	return e, ok && e.Refs != nil && e.Key != ""
}

// retryable is an error the Tool.Execute activity returns as its own
// failure, so that its retry policy runs the call again.
type retryable struct{ err error }

func (e retryable) Error() string { return e.err.Error() }
func (e retryable) Unwrap() error { return e.err }

// IsRetryable reports whether a tool's error asks for the call to be run
// again (a send that failed in a way a retry may fix). Only an idempotent
// tool's call is retried.
func IsRetryable(err error) bool {
	var r retryable
	return errors.As(err, &r)
}

// Tools returns send_message and send_file for the allow list (ParseAllow's
// entries); send_file reads files as the read tool does, with protected.
func Tools(allow []string, protected []tools.Protected) []agent.Tool {
	return []agent.Tool{&sendTool{allow: allow, protected: protected},
		&sendTool{allow: allow, protected: protected, file: true}}
}

type sendTool struct {
	allow     []string
	protected []tools.Protected
	file      bool
}

// WithProtected implements tools.FileTool.
func (t *sendTool) WithProtected(p []tools.Protected) agent.Tool {
	return &sendTool{allow: t.allow, protected: p, file: t.file}
}

func (t *sendTool) name() string {
	if t.file {
		return SendFileName
	}
	return SendMessageName
}

func (t *sendTool) Spec() agent.ToolSpec {
	allowed := strings.Join(t.allow, ", ")
	if t.file {
		return agent.ToolSpec{
			Name: SendFileName,
			Description: "Send a file from the workspace to a chat channel, a person or an issue, once. " +
				"`to` is a target such as slack:#ops, telegram:-100123 or github:owner/repo#12; allowed targets: " + allowed +
				". `path` is relative to the workspace. GitHub takes text files only (posted as a comment).",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"to":{"type":"string","description":"the target, <kind>:<destination>"},` +
				`"path":{"type":"string","description":"the file to send, relative to the workspace"}},` +
				`"required":["to","path"],"additionalProperties":false}`),
			Idempotent: true,
			Timeout:    2 * time.Minute,
		}
	}
	return agent.ToolSpec{
		Name: SendMessageName,
		Description: "Send a message to a chat channel, a person or an issue, once (it is not your answer: " +
			"use it to tell people elsewhere). `to` is a target such as slack:#ops, telegram:-100123 or " +
			"github:owner/repo#12; allowed targets: " + allowed + ".",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"to":{"type":"string","description":"the target, <kind>:<destination>"},` +
			`"text":{"type":"string","description":"the message (Markdown)"}},` +
			`"required":["to","text"],"additionalProperties":false}`),
		Idempotent: true,
		Timeout:    time.Minute,
	}
}

type sendArgs struct {
	To   string `json:"to"`
	Text string `json:"text"`
	Path string `json:"path"`
}

func fail(format string, args ...any) agent.ToolResult {
	return agent.ToolResult{IsError: true, Content: fmt.Sprintf(format, args...)}
}

func (t *sendTool) Run(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	name := t.name()
	var a sendArgs
	if err := json.Unmarshal(call.Args, &a); err != nil {
		return fail("invalid arguments: %v", err), nil
	}
	target, err := ParseTarget(a.To)
	if err != nil {
		return fail("%s refused: %v", name, err), nil
	}
	if !Allowed(t.allow, target) {
		return fail("%s refused: %s is not an allowed target (delivery.allow in fastagent.yaml: %s); nothing was sent",
			name, target, strings.Join(t.allow, ", ")), nil
	}
	env, ok := envFrom(ctx)
	if !ok {
		return fail("%s works only inside a durable session", name), nil
	}
	var file *File
	what := "the message"
	if t.file {
		f, res := t.read(ctx, call, a.Path)
		if res != nil {
			return *res, nil
		}
		file, what = f, a.Path
	} else {
		if strings.TrimSpace(a.Text) == "" {
			return fail("%s refused: text is empty", name), nil
		}
		if len(a.Text) > MaxTextBytes {
			return fail("%s refused: the text is %s, more than %s; send a file instead", name,
				tools.FormatSize(len(a.Text)), tools.FormatSize(MaxTextBytes)), nil
		}
	}
	ref, err := Deliver(ctx, env.Senders, env.Refs, target, env.Session, env.Key, a.Text, file)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return agent.ToolResult{}, ctx.Err()
	case IsPermanent(err):
		return fail("%s: %s was not sent to %s: %v", name, what, target, err), nil
	default:
		return agent.ToolResult{}, retryable{fmt.Errorf("%s to %s: %w", name, target, err)}
	}
	details, _ := json.Marshal(map[string]string{"to": target.String(), "ref": ref})
	if t.file {
		return agent.ToolResult{Content: fmt.Sprintf("Sent %s (%s) to %s.", a.Path, tools.FormatSize(len(file.Data)), target),
			Details: details}, nil
	}
	return agent.ToolResult{Content: fmt.Sprintf("Sent the message to %s.", target), Details: details}, nil
}

// read reads the file send_file sends as the read tool would (no escape
// from the workspace, no protected secret, no state dir or .env).
func (t *sendTool) read(ctx context.Context, call agent.ToolCall, p string) (*File, *agent.ToolResult) {
	if strings.TrimSpace(p) == "" {
		r := fail("%s refused: path is required", SendFileName)
		return nil, &r
	}
	if secretComponent(p) {
		r := fail("%s refused: %s is not readable by the agent (it holds the runtime's state or the operator's secrets)", SendFileName, p)
		return nil, &r
	}
	data, rel, res, err := tools.ReadWorkspaceFile(ctx, call.Dir, p, t.protected, MaxFileBytes)
	if err != nil {
		r := fail("%s refused: %v", SendFileName, err)
		return nil, &r
	}
	if res != nil {
		res.Content = SendFileName + " refused: " + res.Content
		res.IsError = true
		return nil, res
	}
	if secretComponent(rel) {
		r := fail("%s refused: %s is not readable by the agent (it holds the runtime's state or the operator's secrets)", SendFileName, p)
		return nil, &r
	}
	if len(data) == 0 {
		r := fail("%s refused: %s is empty", SendFileName, p)
		return nil, &r
	}
	return &File{Name: path.Base(rel), Data: data}, nil
}

// secretComponent reports whether a path has a component naming the
// runtime's state dir or a .env file.
func secretComponent(p string) bool {
	for _, c := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if c == ".fastagent" || c == ".env" {
			return true
		}
	}
	return false
}
