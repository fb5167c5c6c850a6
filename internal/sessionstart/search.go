package sessionstart

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/fastagent/fastagent/workflows"
)

// ErrBadCursor is a cursor Search did not hand out.
var ErrBadCursor = errors.New("bad cursor")

// Hit is one session workflow a search found, with its search attributes.
type Hit struct {
	Session   string `json:"session"`
	Agent     string `json:"agent,omitempty"`
	Principal string `json:"principal,omitempty"`
	Channel   string `json:"channel,omitempty"`
	Parent    string `json:"parent,omitempty"`
	// Status is the session's FastAgentStatus (idle, running,
	// waiting_approval, waiting_answer); Workflow the run's execution status (running,
	// completed, terminated, …).
	Status   string    `json:"status,omitempty"`
	Workflow string    `json:"workflow"`
	Started  time.Time `json:"started"`
}

// Page is one page of a search; NextCursor continues it ("" at the end).
type Page struct {
	Sessions   []Hit  `json:"sessions"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// Search lists the session workflows matching f from Temporal visibility,
// newest first. Visibility is eventually consistent: a session started or
// changed a moment ago may not match yet.
func Search(ctx context.Context, c client.Client, f Filter, limit int, cursor string) (Page, error) {
	token, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return Page{}, fmt.Errorf("%w: %w", ErrBadCursor, err)
	}
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: Query(f), PageSize: int32(limit), NextPageToken: token,
	})
	if err != nil {
		return Page{}, fmt.Errorf("search sessions: %w", err)
	}
	page := Page{Sessions: []Hit{}, NextCursor: base64.RawURLEncoding.EncodeToString(resp.GetNextPageToken())}
	for _, e := range resp.GetExecutions() {
		sa := e.GetSearchAttributes()
		page.Sessions = append(page.Sessions, Hit{
			Session:   strings.TrimPrefix(e.GetExecution().GetWorkflowId(), workflows.WorkflowID("")),
			Agent:     keyword(sa, workflows.AttrAgent),
			Principal: keyword(sa, workflows.AttrPrincipal),
			Channel:   keyword(sa, workflows.AttrChannel),
			Parent:    keyword(sa, workflows.AttrParent),
			Status:    keyword(sa, workflows.AttrStatus),
			Workflow:  strings.ToLower(strings.TrimPrefix(e.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")),
			Started:   e.GetStartTime().AsTime(),
		})
	}
	return page, nil
}

// keyword decodes a Keyword search attribute ("" when absent).
func keyword(sa *commonpb.SearchAttributes, name string) string {
	p := sa.GetIndexedFields()[name]
	if p == nil {
		return ""
	}
	var s string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &s); err != nil {
		return ""
	}
	return s
}
