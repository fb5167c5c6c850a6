package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// fetchReplier is a replier whose Fetch fails with err.
type fetchReplier struct {
	fakeReplier
	err error
}

func (f *fetchReplier) Fetch(_ context.Context, _ wire.Target, p agent.Prompt, _ string) (agent.Prompt, error) {
	return p, f.err
}

// TestChannelFetchErrors: a Fetch error marked channels.Permanent fails
// the activity without retries; any other error is retried.
func TestChannelFetchErrors(t *testing.T) {
	t.Parallel()
	data, _ := json.Marshal(wire.Target{Chat: "T:C", Attachments: []wire.Attachment{{ID: "F1"}}})
	cases := []struct {
		name         string
		err          error
		nonRetryable bool
	}{
		{"permanent", channels.Permanent(errors.New("file too big")), true},
		{"transient", errors.New("download timed out"), false},
	}
	for _, c := range cases {
		r := activities.NewReplies(nil, nil, []channels.Replier{&fetchReplier{err: c.err}}, nil)
		_, err := r.Fetch(context.Background(), wire.FetchInput{Session: "s", Turn: "k",
			Reply: wire.ReplyTarget{Kind: "fake", Data: data}, Prompt: agent.Prompt{Text: "hi"}})
		var app *temporal.ApplicationError
		got := errors.As(err, &app) && app.NonRetryable()
		if err == nil || got != c.nonRetryable {
			t.Errorf("%s: error %v, non-retryable %v, want %v", c.name, err, got, c.nonRetryable)
		}
	}
}
