package activities_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
)

// flakySender fails its first sends with errs, then sends.
type flakySender struct {
	mu   sync.Mutex
	errs []error
	sent []string
}

func (f *flakySender) Kind() string { return "slack" }

func (f *flakySender) Deliver(_ context.Context, req delivery.Request) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return "", err
	}
	f.sent = append(f.sent, req.Dest+" "+req.Text)
	return "ts", nil
}

// TestSend: Channel.Send sends to each target once: a failure a retry may
// fix fails the attempt (retryable) and the next attempt sends only what
// is unsent; a target no retry can reach (a channel not configured)
// fails the activity for good, naming it, after the others were sent.
func TestSend(t *testing.T) {
	t.Parallel()
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	s := &flakySender{errs: []error{errors.New("timeout")}} // the first target's first send fails
	r := &activities.Replies{Store: st, Senders: delivery.Senders{"slack": s}}
	in := wire.SendInput{Session: "schedule:daily", Key: "deliver/fire-1", Targets: []string{"slack:#ops", "slack:#dev"}, Text: "7 open issues"}
	ctx := context.Background()
	res, err := r.Send(ctx, in)
	var app *temporal.ApplicationError
	if err == nil || errors.As(err, &app) && app.NonRetryable() {
		t.Fatalf("first attempt = %v, want a retryable failure", err)
	}
	if strings.Join(res.Delivered, ",") != "slack:#dev" {
		t.Errorf("first attempt delivered %v", res.Delivered)
	}
	for range 2 {
		if res, err = r.Send(ctx, in); err != nil || len(res.Delivered) != 2 {
			t.Fatalf("retry = %+v, %v", res, err)
		}
	}
	if strings.Join(s.sent, "|") != "#dev 7 open issues|#ops 7 open issues" {
		t.Errorf("sent %q, want each target once", s.sent)
	}

	in.Key, in.Targets = "deliver/fire-2", []string{"telegram:42", "slack:#ops"}
	res, err = r.Send(ctx, in)
	if !errors.As(err, &app) || !app.NonRetryable() || !strings.Contains(err.Error(), "telegram:42: no telegram channel is configured") {
		t.Fatalf("unconfigured target = %v, want a non-retryable failure naming it", err)
	}
	if strings.Join(res.Delivered, ",") != "slack:#ops" {
		t.Errorf("delivered %v beside the failed target", res.Delivered)
	}
}
