package uigate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// HistoryClient is the one frontend call the raw history download makes.
type HistoryClient interface {
	GetWorkflowExecutionHistory(ctx context.Context, in *workflowservice.GetWorkflowExecutionHistoryRequest,
		opts ...grpc.CallOption) (*workflowservice.GetWorkflowExecutionHistoryResponse, error)
}

// RawHistory serves the UI's raw history download
// (/api/v1/namespaces/{namespace}/workflows/{workflow}/run/{runid}/history.json)
// as the UI server does — a JSON array of the events, streamed page by page,
// a failure appended as {"error": …} — but calling the frontend with key.
// The UI server's own handler calls it without the request's headers, so
// behind the gate it would be refused.
func RawHistory(c HistoryClient, key string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := metadata.AppendToOutgoingContext(r.Context(), "authorization", "Bearer "+key)
		req := &workflowservice.GetWorkflowExecutionHistoryRequest{
			Namespace: r.PathValue("namespace"),
			Execution: &commonpb.WorkflowExecution{WorkflowId: r.PathValue("workflow"), RunId: r.PathValue("runid")},
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "[")
		n, err := streamHistory(ctx, c, req, w)
		if err != nil {
			if n > 0 {
				fmt.Fprint(w, ",")
			}
			msg, _ := json.Marshal(map[string]string{"error": err.Error()})
			_, _ = w.Write(msg)
		}
		fmt.Fprint(w, "]")
	})
}

// streamHistory writes every event of the history, comma-separated, and
// returns how many it wrote.
func streamHistory(ctx context.Context, c HistoryClient, req *workflowservice.GetWorkflowExecutionHistoryRequest, w http.ResponseWriter) (int, error) {
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	n := 0
	for {
		resp, err := c.GetWorkflowExecutionHistory(ctx, req)
		if err != nil {
			return n, err
		}
		for _, ev := range resp.GetHistory().GetEvents() {
			if n > 0 {
				fmt.Fprint(w, ",")
			}
			if err := enc.Encode(ev); err != nil {
				return n, err
			}
			n++
		}
		if flusher != nil {
			flusher.Flush()
		}
		if len(resp.GetNextPageToken()) == 0 {
			return n, nil
		}
		req.NextPageToken = resp.GetNextPageToken()
	}
}
