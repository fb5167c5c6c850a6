package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/workspace"
)

// SendFileName is the name of the tool that sends a workspace file to the
// current Slack conversation.
const SendFileName = "slack_send_file"

// SendFileTool returns the slack_send_file tool. It exists only in Slack
// sessions (workspace.SessionTool) and runs inside the worker, with the
// replier's token: no tool process ever sees it.
//
// It uses Slack's external upload (files.getUploadURLExternal → POST to
// the upload URL → files.completeUploadExternal with channel_id and
// thread_ts). The tool is not idempotent, so the runtime never re-runs it
// after a lost worker ("outcome unknown" instead); but when the complete
// call's response is lost after Slack shared the file, the tool reports a
// failure and a new call by the model can share the file a second time:
// delivery is at least once across an ambiguous completion, as in
// FastAgent.
func (r *Replier) SendFileTool() agent.Tool { return &sendFileTool{r: r} }

type sendFileTool struct {
	r *Replier
	// protected is the agent's protected list (tools.FileTool); without
	// one, the workspace's own rules and secrets.
	protected []tools.Protected
}

// WithProtected implements tools.FileTool.
func (t *sendFileTool) WithProtected(p []tools.Protected) agent.Tool {
	return &sendFileTool{r: t.r, protected: p}
}

type sendFileArgs struct {
	Path    string `json:"path"`
	Title   string `json:"title"`
	Comment string `json:"comment"`
}

func (t *sendFileTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: SendFileName,
		Description: "Send a file from the workspace to the current Slack conversation (into this thread), " +
			"for example a report or an image you made. `path` is relative to the workspace; " +
			"`title` is shown as the file's title (default: its name); `comment` is posted with it.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"the file to send, relative to the workspace"},` +
			`"title":{"type":"string","description":"title shown in Slack (default: the file name)"},` +
			`"comment":{"type":"string","description":"a message posted with the file"}},` +
			`"required":["path"],"additionalProperties":false}`),
		Timeout: 2 * time.Minute,
	}
}

// ForSession implements workspace.SessionTool: Slack sessions only.
func (t *sendFileTool) ForSession(session string) bool {
	_, _, ok := conversation(session)
	return ok
}

// conversation reads the channel and thread of a Slack session ID,
// slack:<team>:<channel>[:<root ts>].
func conversation(session string) (channel, thread string, ok bool) {
	parts := strings.Split(session, ":")
	if len(parts) < 3 || len(parts) > 4 || parts[0] != Kind || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	if len(parts) == 4 {
		if parts[3] == "" {
			return "", "", false
		}
		thread = parts[3]
	}
	return parts[2], thread, true
}

func (t *sendFileTool) Run(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	var a sendFileArgs
	if err := json.Unmarshal(call.Args, &a); err != nil {
		return sendFail("invalid arguments: %v", err), nil
	}
	channel, thread, ok := conversation(call.Session)
	if !ok {
		return sendFail("%s works only in a Slack conversation; this session (%q) is not one", SendFileName, call.Session), nil
	}
	if strings.TrimSpace(a.Path) == "" {
		return sendFail("path is required"), nil
	}
	if secretComponent(a.Path) {
		return sendFail("%s refused: %s is not readable by the agent (it holds the runtime's state or the operator's secrets)", SendFileName, a.Path), nil
	}
	lim := t.r.Files.WithDefaults()
	protected := t.protected
	if protected == nil {
		protected = workspace.ProtectedPaths(workspace.Workspace{Dir: call.Dir}, true)
	}
	data, rel, res, err := tools.ReadWorkspaceFile(ctx, call.Dir, a.Path, protected, lim.MaxFileBytes)
	if err != nil {
		return agent.ToolResult{}, fmt.Errorf("slack_send_file: %w", err)
	}
	if res != nil {
		res.Content = SendFileName + " refused: " + res.Content
		return *res, nil
	}
	if secretComponent(rel) {
		return sendFail("%s refused: %s is not readable by the agent (it holds the runtime's state or the operator's secrets)", SendFileName, a.Path), nil
	}
	if len(data) == 0 {
		return sendFail("%s is empty; Slack does not take empty files", a.Path), nil
	}
	name := path.Base(rel)
	title := a.Title
	if title == "" {
		title = name
	}
	f, err := t.r.api.UploadFileContext(ctx, slack.UploadFileParameters{
		Reader:          bytes.NewReader(data),
		FileSize:        len(data),
		Filename:        name,
		Title:           title,
		InitialComment:  a.Comment,
		Channel:         channel,
		ThreadTimestamp: thread,
	})
	if err != nil {
		if ctx.Err() != nil {
			return agent.ToolResult{}, ctx.Err()
		}
		return sendFail("sending %s to Slack failed: %v. If the failure was in the last step "+
			"(CompleteUploadExternal), the file may have been shared anyway; check before sending it again.", a.Path, err), nil
	}
	details, _ := json.Marshal(map[string]string{"file": f.ID, "channel": channel, "thread": thread})
	return agent.ToolResult{
		Content: fmt.Sprintf("Sent %s (%s) to the Slack conversation as file %s.", rel, tools.FormatSize(len(data)), f.ID),
		Details: details,
	}, nil
}

// secretComponent reports whether a path has a component naming the
// runtime's state dir or a .env file, wherever it is (also in an agent dir
// other than the workspace).
func secretComponent(p string) bool {
	for _, c := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if c == ".fastagent" || c == ".env" {
			return true
		}
	}
	return false
}

func sendFail(format string, args ...any) agent.ToolResult {
	return agent.ToolResult{IsError: true, Content: fmt.Sprintf(format, args...)}
}
