package agent

import "context"

// Progress is what a running tool reports about itself: a line for people
// (Message) and, when it can count, how far it is (Progress of Total; Total
// 0 when unknown). Progress is live only: it reaches the turn's consumers as
// tool_progress events, at most about once a second per call (the latest
// report wins), and is never stored with the turn.
type Progress struct {
	Message  string  `json:"message,omitempty"`
	Progress float64 `json:"progress,omitempty"`
	Total    float64 `json:"total,omitempty"`
}

type progressKey struct{}

// WithProgress returns a context whose ReportProgress calls report. The
// runtime sets it on the context a tool runs with; report must be safe for
// concurrent use and must not block.
func WithProgress(ctx context.Context, report func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

// ReportProgress tells the consumers of the turn how the tool call running
// with ctx is getting on. It never blocks and is a no-op when nothing
// listens (a context the runtime did not give to a tool), so a tool may call
// it as often as it likes: the runtime throttles what is sent.
func ReportProgress(ctx context.Context, p Progress) {
	if f, ok := ctx.Value(progressKey{}).(func(Progress)); ok && f != nil {
		f(p)
	}
}

// ToolProgress returns a tool_progress event of call id (tool name).
func ToolProgress(id, name string, p Progress) Event {
	return Event{Type: TypeToolProgress, ID: id, Name: name, Content: p.Message, Progress: p.Progress, Total: p.Total}
}
