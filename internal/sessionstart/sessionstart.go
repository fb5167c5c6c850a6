// Package sessionstart builds the start options of session workflows — the
// one place that decides a session workflow's ID, reuse and conflict
// policies and start-time search attributes — and registers those search
// attributes on a namespace.
package sessionstart

import (
	"context"
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/workflows"
)

// Options returns the start options of session's workflow on taskQueue
// (workflows.TaskQueue when empty): use the running workflow if there is
// one, start a new one otherwise, with attrs as start-time search
// attributes (the agent defaults to the task queue). search false leaves
// the attributes out (a namespace where they are not registered).
func Options(session, taskQueue string, attrs workflows.SessionAttrs, search bool) client.StartWorkflowOptions {
	if taskQueue == "" {
		taskQueue = workflows.TaskQueue
	}
	opts := client.StartWorkflowOptions{
		ID:                       workflows.WorkflowID(session),
		TaskQueue:                taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            "session " + session,
	}
	if search {
		if attrs.Agent == "" {
			attrs.Agent = taskQueue
		}
		opts.TypedSearchAttributes = attrs.SearchAttributes()
	}
	return opts
}

// Unregistered reports whether err is Temporal refusing a start because a
// search attribute is not registered on the namespace: the start is to be
// sent again without them (Options with search false).
func Unregistered(err error) bool {
	var invalid *serviceerror.InvalidArgument
	if !errors.As(err, &invalid) {
		return false
	}
	msg := strings.ToLower(invalid.Error())
	return strings.Contains(msg, "search attribute") && strings.Contains(msg, "fastagent")
}

// Hint is what to tell an operator whose namespace lacks the attributes.
const Hint = "the session search attributes are not registered on this Temporal namespace, so sessions start without them " +
	"and cannot be found by agent, channel, principal or status; register them with `fastagent search-attributes create` " +
	"(or `temporal operator search-attribute create`, see docs/operations.md, Finding sessions)"

// Missing returns the session search attributes not registered on namespace.
func Missing(ctx context.Context, c client.Client, namespace string) ([]string, error) {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("list search attributes of namespace %q: %w", namespace, err)
	}
	var missing []string
	for _, name := range workflows.SearchAttributeNames() {
		t, ok := resp.GetCustomAttributes()[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		if t != enumspb.INDEXED_VALUE_TYPE_KEYWORD {
			return nil, fmt.Errorf("search attribute %s is registered as %s on namespace %q, want Keyword", name, t, namespace)
		}
	}
	return missing, nil
}

// Register adds the session search attributes that namespace lacks and
// returns the names it added (none when all are there).
func Register(ctx context.Context, c client.Client, namespace string) ([]string, error) {
	missing, err := Missing(ctx, c, namespace)
	if err != nil || len(missing) == 0 {
		return nil, err
	}
	attrs := map[string]enumspb.IndexedValueType{}
	for _, name := range missing {
		attrs[name] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: attrs,
	})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return nil, fmt.Errorf("register search attributes %s on namespace %q: %w", strings.Join(missing, ", "), namespace, err)
	}
	return missing, nil
}

// Query builds a visibility query over the session search attributes from
// the filters that are set (empty: every session workflow, sub-agents'
// Delegate workflows included).
func Query(f Filter) string {
	parts := []string{"(WorkflowType = " + quote(workflows.SessionWorkflowType) + " OR WorkflowType = " + quote(workflows.DelegateWorkflowType) + ")"}
	for _, kv := range []struct{ name, val string }{
		{workflows.AttrAgent, f.Agent}, {workflows.AttrPrincipal, f.Principal},
		{workflows.AttrChannel, f.Channel}, {workflows.AttrStatus, f.Status}, {workflows.AttrParent, f.Parent},
	} {
		if kv.val != "" {
			parts = append(parts, fmt.Sprintf("%s = %s", kv.name, quote(kv.val)))
		}
	}
	return strings.Join(parts, " AND ")
}

// Filter selects sessions by their search attributes.
type Filter struct {
	Agent, Principal, Channel, Status, Parent string
}

// Check refuses a status no session has, saying which ones there are.
func (f Filter) Check() error {
	switch f.Status {
	case "", workflows.StatusIdle, workflows.StatusWaiting, workflows.StatusAsking:
		return nil
	}
	return fmt.Errorf("status %q: a session's status is %s, %s or %s (whether a turn is running right now is not searchable: "+
		"see the session's state, `fastagent session show`)", f.Status, workflows.StatusIdle, workflows.StatusWaiting, workflows.StatusAsking)
}

// quote makes s a visibility query string literal.
func quote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
