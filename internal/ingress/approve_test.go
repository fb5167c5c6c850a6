package ingress_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/workflows"
)

// approvals is a Control that keeps the approve requests it gets and
// refuses those whose hashes are not the waiting call's, as the session
// workflow does.
type approvals struct {
	ingress.Control
	pending workflows.PendingApproval
	got     []workflows.ApproveRequest
}

func (a *approvals) Approve(_ context.Context, _ string, req workflows.ApproveRequest) error {
	a.got = append(a.got, req)
	if (req.ArgsHash != "" && req.ArgsHash != a.pending.ArgsHash) || (req.DefinitionHash != "" && req.DefinitionHash != a.pending.DefinitionHash) {
		return &agent.Error{Code: agent.CodeCallChanged, Message: `tool call "c1" changed`}
	}
	return nil
}

// POST /sessions/{id}/approvals/{call} hands argsHash and definitionHash to
// the session; a refusal because the call changed is 409 call_changed.
func TestApproveSendsHashes(t *testing.T) {
	t.Parallel()
	ctl := &approvals{pending: workflows.PendingApproval{Call: "c1", ArgsHash: "sha256:a", DefinitionHash: "sha256:d"}}
	s := &ingress.Server{NoAuth: true, Control: ctl}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	post := func(body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(hs.URL+"/sessions/s1/approvals/c1", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	cases := []struct {
		body string
		want int
		req  workflows.ApproveRequest
	}{
		{`{"approve":true,"argsHash":"sha256:a","definitionHash":"sha256:d"}`, http.StatusOK,
			workflows.ApproveRequest{Call: "c1", Approve: true, ArgsHash: "sha256:a", DefinitionHash: "sha256:d"}},
		{`{"approve":true,"argsHash":"sha256:other"}`, http.StatusConflict,
			workflows.ApproveRequest{Call: "c1", Approve: true, ArgsHash: "sha256:other"}},
		{`{"approve":false,"reason":"no"}`, http.StatusOK, workflows.ApproveRequest{Call: "c1", Reason: "no"}},
		{`{"decision":"approve","args":{ "command" : "ls -la" }}`, http.StatusOK,
			workflows.ApproveRequest{Call: "c1", Approve: true, Args: json.RawMessage(`{"command":"ls -la"}`)}},
		{`{"decision":"deny","reason":"no"}`, http.StatusOK, workflows.ApproveRequest{Call: "c1", Reason: "no"}},
	}
	for _, c := range cases {
		ctl.got = nil
		st, v := post(c.body)
		if st != c.want || len(ctl.got) != 1 || !reflect.DeepEqual(ctl.got[0], c.req) {
			t.Errorf("%s: %d %v, sent %+v; want %d and %+v", c.body, st, v, ctl.got, c.want, c.req)
		}
		if c.want == http.StatusConflict && v["code"] != agent.CodeCallChanged {
			t.Errorf("%s: code %v, want %s", c.body, v["code"], agent.CodeCallChanged)
		}
	}
	// Edits that cannot apply are refused at the door: nothing is sent.
	for _, body := range []string{
		`{"approve":false,"args":{"command":"ls"}}`,
		`{"decision":"deny","args":{"command":"ls"}}`,
		`{"approve":true,"args":"ls"}`,
		`{"approve":true,"args":["ls"]}`,
		`{"decision":"maybe"}`,
		`{"decision":"approve","approve":false}`,
	} {
		ctl.got = nil
		st, v := post(body)
		if st != http.StatusBadRequest || len(ctl.got) != 0 || v["code"] != agent.CodeInvalidCommand {
			t.Errorf("%s: %d %v, sent %+v; want 400 invalid_command and nothing sent", body, st, v, ctl.got)
		}
	}
}
