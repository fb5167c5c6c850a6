package channels

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows"
)

// updater is a Temporal client whose approve updates answer err.
type updater struct {
	opts []client.UpdateWorkflowOptions
	err  error
}

func (u *updater) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, errors.New("not used")
}

func (u *updater) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	u.opts = append(u.opts, o)
	return handle{u.err}, nil
}

type handle struct{ err error }

func (handle) WorkflowID() string               { return "" }
func (handle) RunID() string                    { return "" }
func (handle) UpdateID() string                 { return "" }
func (h handle) Get(context.Context, any) error { return h.err }

type starterOnly struct{}

func (starterOnly) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, nil
}

// A decision is an approve update on its session keyed by the click; the
// session's refusals are told to the person and are not failed hand-offs;
// anything else fails the hand-off, so the platform redelivers.
func TestDecide(t *testing.T) {
	t.Parallel()
	dec := func(notes *[]string) Decision {
		return Decision{Session: "slack:T:C:1", ID: "slack:T:U:1.1", Request: workflows.ApproveRequest{Call: "c1", Approve: true, By: "slack:U"},
			Notify: func(_ context.Context, text string) error { *notes = append(*notes, text); return nil }}
	}
	for _, tc := range []struct {
		name    string
		err     error
		wantErr bool
		note    string
	}{
		{name: "applied"},
		{name: "not an approver", err: temporal.NewApplicationError("\"slack:X\" may not decide", agent.CodeNotApprover), note: "may not decide"},
		{name: "nothing waits", err: temporal.NewApplicationError("no tool call \"c1\" is waiting", agent.CodeNotFound), note: "not applied"},
		{name: "the server failed", err: errors.New("deadline exceeded"), wantErr: true},
	} {
		var notes []string
		u := &updater{err: tc.err}
		err := Decide(context.Background(), u, dec(&notes))
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: error %v, want error %v", tc.name, err, tc.wantErr)
		}
		if len(u.opts) != 1 || u.opts[0].WorkflowID != workflows.WorkflowID("slack:T:C:1") || u.opts[0].UpdateID != "decision:slack:T:U:1.1" ||
			u.opts[0].UpdateName != workflows.UpdateApprove {
			t.Errorf("%s: updates %+v, want one approve on the session keyed by the click", tc.name, u.opts)
		}
		if tc.note == "" && len(notes) != 0 || tc.note != "" && (len(notes) != 1 || !strings.Contains(notes[0], tc.note)) {
			t.Errorf("%s: notes %q, want %q", tc.name, notes, tc.note)
		}
	}
	if err := Decide(context.Background(), starterOnly{}, dec(new([]string))); err == nil {
		t.Error("a client that cannot send updates: no error")
	}
}
