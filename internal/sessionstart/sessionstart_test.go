package sessionstart

import (
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"

	"github.com/fastagent/fastagent/workflows"
)

func TestQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		f    Filter
		want string
	}{
		{Filter{}, "(WorkflowType = 'Session' OR WorkflowType = 'Delegate')"},
		{Filter{Channel: "slack", Status: "running"}, "(WorkflowType = 'Session' OR WorkflowType = 'Delegate') AND FastAgentChannel = 'slack' AND FastAgentStatus = 'running'"},
		{Filter{Principal: `o'brien\x`}, `(WorkflowType = 'Session' OR WorkflowType = 'Delegate') AND FastAgentPrincipal = 'o\'brien\\x'`},
		{Filter{Agent: "a", Parent: "p"}, "(WorkflowType = 'Session' OR WorkflowType = 'Delegate') AND FastAgentAgent = 'a' AND FastAgentParent = 'p'"},
	}
	for _, tt := range tests {
		if got := Query(tt.f); got != tt.want {
			t.Errorf("Query(%+v) = %q, want %q", tt.f, got, tt.want)
		}
	}
}

func TestUnregistered(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("start: %w", serviceerror.NewInvalidArgument("Namespace default has no mapping defined for search attribute FastAgentChannel")), true},
		{serviceerror.NewInvalidArgument("search attribute FastAgentStatus is not defined"), true},
		{serviceerror.NewInvalidArgument("search attribute Other is not defined"), false},
		{serviceerror.NewInvalidArgument("workflow ID too long"), false},
		{errors.New("search attribute FastAgentChannel is not defined"), false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := Unregistered(tt.err); got != tt.want {
			t.Errorf("Unregistered(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	o := Options("s1", "", workflows.SessionAttrs{Channel: "http", Principal: "alice"}, true)
	if o.ID != "session:s1" || o.TaskQueue != workflows.TaskQueue {
		t.Errorf("options = %+v", o)
	}
	sa := o.TypedSearchAttributes
	for key, want := range map[string]string{workflows.AttrAgent: workflows.TaskQueue, workflows.AttrChannel: "http",
		workflows.AttrPrincipal: "alice", workflows.AttrStatus: workflows.StatusIdle} {
		got := ""
		for k, v := range sa.GetUntypedValues() {
			if k.GetName() == key {
				got, _ = v.(string)
			}
		}
		if got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	if sa.Size() != 4 {
		t.Errorf("%d attributes, want 4 (no empty parent)", sa.Size())
	}
	if o := Options("s1", "q", workflows.SessionAttrs{Channel: "http"}, false); o.TypedSearchAttributes.Size() != 0 {
		t.Errorf("without search: %d attributes", o.TypedSearchAttributes.Size())
	}
}
