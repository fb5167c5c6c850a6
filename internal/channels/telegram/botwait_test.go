package telegram

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/testsupport/faketelegram"
	"github.com/fastagent/fastagent/internal/wire"
)

// handStarter records the chat messages handed to it.
type handStarter struct {
	mu   sync.Mutex
	msgs []wire.ChatMessage
}

func (s *handStarter) SignalWithStartWorkflow(_ context.Context, _, _ string, arg interface{},
	_ client.StartWorkflowOptions, _ interface{}, _ ...interface{}) (client.WorkflowRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := arg.(wire.ChatMessage); ok {
		s.msgs = append(s.msgs, m)
	}
	return nil, nil
}

// TestGroupMentionWhileBotUnknown: while getMe fails (at startup), a group
// @mention delivered by webhook is not acknowledged and dropped: it is
// refused (503) so Telegram delivers it again, the runtime's resolver
// retries getMe, and the redelivery is a summons.
func TestGroupMentionWhileBotUnknown(t *testing.T) {
	t.Parallel()
	fake := faketelegram.New(testToken)
	t.Cleanup(fake.Close)
	fake.Fail("getMe", 1)
	d := testDoor(wire.GroupMentions)
	d.Bot = NewBot("", NewAPI(fake.URL, testToken))
	// The runtime's resolver looks the bot up from startup.
	var ids channels.Resolver
	ids.Add(d.Bot)
	ids.Start(context.Background())
	t.Cleanup(ids.Close)
	st := &handStarter{}
	h := channels.Handler(d, st, "q", nil)
	body := fixture(t, "group_mention.json")
	deliver := func() int {
		r := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
		r.Header.Set(SecretHeader, d.Secret)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := deliver(); code != http.StatusServiceUnavailable {
		t.Fatalf("first delivery while the bot is unknown: status %d, want 503 (delivered again)", code)
	}
	select {
	case <-d.Bot.Resolved():
	case <-time.After(30 * time.Second): // a guard only: the background retry comes after about a second
		t.Fatal("the bot was never resolved in the background")
	}
	if code := deliver(); code != http.StatusOK {
		t.Fatalf("redelivery: status %d, want 200", code)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.msgs) != 1 || !st.msgs[0].Summoned {
		t.Fatalf("handed off %+v, want the mention as a summons", st.msgs)
	}
}
