package slack_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/workspace"
)

// workspaceDir is a workspace with a report, secrets and state.
func workspaceDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"out/report.csv":          "a,b\n1,2\n",
		".env":                    "SLACK_BOT_TOKEN=xoxb-secret\n",
		".fastagent/sessions.db":  "state",
		"agent/.env":              "X_TOKEN=secret\n",
		"empty.txt":               "",
		"fastagent.yaml":          "model: openai/x\n",
		"deep/.fastagent/x.state": "state",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(".env", filepath.Join(dir, "innocent.txt")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func sendCall(session, dir string, args map[string]string) agent.ToolCall {
	b, _ := json.Marshal(args)
	return agent.ToolCall{ID: "call-1", Name: slack.SendFileName, Args: b, Session: session, Dir: dir}
}

// TestSendFile: the tool uploads a workspace file with the three external
// upload calls into the session's channel and thread.
func TestSendFile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, session, channel, thread string
	}{
		{"thread session", "slack:T1:C0CHAN:1700000000.000100", "C0CHAN", "1700000000.000100"},
		{"continuous session", "slack:T1:D0DM", "D0DM", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake, rp := newFake(t)
			dir := workspaceDir(t)
			res, err := rp.SendFileTool().Run(context.Background(), sendCall(c.session, dir,
				map[string]string{"path": "out/report.csv", "title": "Q3 report", "comment": "here it is"}))
			if err != nil || res.IsError {
				t.Fatalf("Run = %+v, %v", res, err)
			}
			methods := []string{}
			for _, call := range fake.Calls() {
				methods = append(methods, call.Method)
			}
			if strings.Join(methods, ",") != "files.getUploadURLExternal,files.completeUploadExternal" {
				t.Errorf("Web API calls = %v", methods)
			}
			get := fake.Calls("files.getUploadURLExternal")[0]
			if get.Get("filename") != "report.csv" || get.Get("length") != "8" {
				t.Errorf("getUploadURLExternal params = %v", get.Params)
			}
			ups := fake.Uploads()
			if len(ups) != 1 {
				t.Fatalf("uploads = %+v, want one", ups)
			}
			u := ups[0]
			if string(u.Data) != "a,b\n1,2\n" || !u.Completed || u.Channel != c.channel || u.Thread != c.thread ||
				u.Title != "Q3 report" || u.Comment != "here it is" || u.Authorization != "Bearer "+botToken {
				t.Errorf("upload = %+v, want the report in %s thread %q", u, c.channel, c.thread)
			}
			if !strings.Contains(res.Content, u.ID) {
				t.Errorf("result %q does not name file %s", res.Content, u.ID)
			}
		})
	}
}

// TestSendFileRefused: outside Slack sessions, on secret or outside paths,
// and on empty files, the tool refuses without calling Slack.
func TestSendFileRefused(t *testing.T) {
	t.Parallel()
	const session = "slack:T1:C0CHAN:1700000000.000100"
	dir := workspaceDir(t)
	cases := []struct {
		name, session, path, want string
	}{
		{"http session", "alice-session", "out/report.csv", "works only in a Slack conversation"},
		{"other channel session", "feishu:oc_1:om_1", "out/report.csv", "works only in a Slack conversation"},
		{"slack without channel", "slack:T1", "out/report.csv", "works only in a Slack conversation"},
		{".env", session, ".env", "not readable"},
		{"state dir", session, ".fastagent/sessions.db", "not readable"},
		{"agent dir .env", session, "agent/.env", "not readable"},
		{"nested state dir", session, "deep/.fastagent/x.state", "not readable"},
		{"symlink to .env", session, "innocent.txt", "not readable"},
		{"absolute .env", session, filepath.Join(dir, ".env"), "not readable"},
		{"outside", session, "../outside.txt", "outside the working directory"},
		{"absolute outside", session, "/etc/hostname", "outside the working directory"},
		{"missing", session, "nope.txt", "file not found"},
		{"directory", session, "out", "is a directory"},
		{"empty", session, "empty.txt", "is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake, rp := newFake(t)
			res, err := rp.SendFileTool().Run(context.Background(), sendCall(c.session, dir, map[string]string{"path": c.path}))
			if err != nil {
				t.Fatal(err)
			}
			if !res.IsError || !strings.Contains(res.Content, c.want) {
				t.Errorf("result = %+v, want an error saying %q", res, c.want)
			}
			if calls := fake.Calls(); len(calls) != 0 {
				t.Errorf("Slack was called: %+v", calls)
			}
		})
	}
}

// TestSendFileCompleteFails: a failed completion is an error result that
// warns the file may have been shared (at least once).
func TestSendFileCompleteFails(t *testing.T) {
	t.Parallel()
	fake, rp := newFake(t)
	fake.Fail("files.completeUploadExternal", fakeslack.Failure{Error: "internal_error"})
	res, err := rp.SendFileTool().Run(context.Background(),
		sendCall("slack:T1:C1:1.2", workspaceDir(t), map[string]string{"path": "out/report.csv"}))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Content, "internal_error") || !strings.Contains(res.Content, "may have been shared") {
		t.Errorf("result = %+v", res)
	}
}

// TestSendFileOnlyInSlackSessions: the tool is offered to the model only in
// Slack sessions, also when fastagent.yaml configures it.
func TestSendFileOnlyInSlackSessions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := "tools:\n  " + slack.SendFileName + ":\n    requiresApproval: true\n"
	if err := os.WriteFile(filepath.Join(dir, workspace.ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	loader, err := workspace.NewLoader(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(loader.Close)
	loader.Extra = []agent.Tool{slack.NewReplier(botToken, "").SendFileTool()}
	def, err := loader.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	has := func(specs []agent.ToolSpec) bool {
		for _, s := range specs {
			if s.Name == slack.SendFileName {
				return s.RequiresApproval
			}
		}
		return false
	}
	cases := []struct {
		session string
		want    bool
	}{
		{"slack:T1:C1:1700000000.000100", true},
		{"slack:T1:D1", true},
		{"web-session", false},
		{"feishu:oc_1", false},
		{"slack:T1", false},
	}
	for _, c := range cases {
		if got := has(def.SessionSpecs(c.session, nil)); got != c.want {
			t.Errorf("session %q: offered = %v, want %v", c.session, got, c.want)
		}
	}
}

// TestSendFileHonoursTheAgentsList: given the agent's protected list (the
// loader gives it through tools.FileTool), the tool refuses what it marks
// secret — another agent's folder in this workspace, the worker's state
// dir under another name — as read does.
func TestSendFileHonoursTheAgentsList(t *testing.T) {
	t.Parallel()
	dir := workspaceDir(t)
	fake, rp := newFake(t)
	ft, ok := rp.SendFileTool().(tools.FileTool)
	if !ok {
		t.Fatal("slack_send_file does not take the agent's protected list")
	}
	tool := ft.WithProtected([]tools.Protected{{Path: filepath.Join(dir, "out"), Reason: "it belongs to another agent", Secret: true}})
	res, err := tool.Run(context.Background(), sendCall("slack:T1:C0CHAN:1700000000.000100", dir, map[string]string{"path": "out/report.csv"}))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Content, "not readable") {
		t.Errorf("result = %+v, want a refusal", res)
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("Slack was called: %+v", calls)
	}
	if !workspace.ForSession(tool, "slack:T1:C0CHAN") || workspace.ForSession(tool, "alice") {
		t.Error("the tool with a list is not offered in the same sessions")
	}
}
