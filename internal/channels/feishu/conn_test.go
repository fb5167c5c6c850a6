package feishu_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// TestConnLongConnection runs the SDK's larkws client against the fake's
// long-connection endpoint: connect → ready, event → hand-off → ACK 200,
// failed hand-off → ACK 500 (the platform pushes again), reconnect after
// the server drops the socket, and after shutdown events are refused.
func TestConnLongConnection(t *testing.T) {
	if sdkRace {
		t.Skip("the SDK's larkws client has data races of its own (see race_on_test.go)")
	}
	t.Parallel()
	fake := fakefeishu.New()
	t.Cleanup(fake.Close)
	p := feishu.Feishu()
	p.BaseURL = fake.URL
	d := &feishu.Door{Profile: p, Bot: feishu.NewBot(bot, nil)}
	conn := &feishu.Conn{Door: d, AppID: "cli_test", AppSecret: "app-secret"}

	got := make(chan channels.Parsed, 10)
	var failHand atomic.Bool
	hand := func(_ context.Context, p channels.Parsed) error {
		if failHand.Load() {
			return errors.New("temporal unavailable")
		}
		got <- p
		return nil
	}
	var readies atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- conn.Run(ctx, hand, func() { readies.Add(1) }) }()
	wait.For(t, 15*time.Second, "ready", func() bool { return readies.Load() == 1 })

	event := fixture(t, "p2p_text.json")
	code, err := fake.Push(event, 5*time.Second)
	if err != nil || code != http.StatusOK {
		t.Fatalf("push: ACK %d, %v; want 200", code, err)
	}
	select {
	case p := <-got:
		if len(p.Messages) != 1 || p.Messages[0].ID != "om_p2p0000000000000000000000000001" || !p.Messages[0].Direct {
			t.Errorf("handed %+v", p.Messages)
		}
	default:
		t.Fatal("ACK before the hand-off")
	}

	// A recall over the long connection is handed off too.
	if code, err := fake.Push(fixture(t, "message_recalled.json"), 5*time.Second); err != nil || code != http.StatusOK {
		t.Fatalf("push of a recall: ACK %d, %v; want 200", code, err)
	}
	select {
	case p := <-got:
		if len(p.Messages) != 1 || p.Messages[0].ID != "om_grp0000000000000000000000000004" || !p.Messages[0].Deleted {
			t.Errorf("handed for a recall %+v", p.Messages)
		}
	default:
		t.Fatal("recall: ACK before the hand-off")
	}

	// An approval click over the long connection is handed off as a
	// decision and answered with its toast.
	code, data, err := fake.PushCallback(fixture(t, "card_action.json"), 5*time.Second)
	var ans callback.CardActionTriggerResponse
	if err != nil || code != http.StatusOK || json.Unmarshal(data, &ans) != nil || ans.Toast == nil || ans.Toast.Content != "Approved." {
		t.Fatalf("push of a click: ACK %d %s, %v; want 200 with the toast", code, data, err)
	}
	select {
	case p := <-got:
		if len(p.Decisions) != 1 || p.Decisions[0].ID != "feishu:f7984f25108f8137722bb63cee927e66" || !p.Decisions[0].Request.Approve {
			t.Errorf("handed for a click %+v", p)
		}
	default:
		t.Fatal("click: ACK before the hand-off")
	}

	failHand.Store(true)
	if code, err := fake.Push(event, 5*time.Second); err != nil || code != http.StatusInternalServerError {
		t.Errorf("push with a failing hand-off: ACK %d, %v; want 500", code, err)
	}
	failHand.Store(false)

	fake.Drop()
	wait.For(t, 15*time.Second, "the reconnect", func() bool { return len(fake.Calls("ws.connect")) == 2 && fake.Connected() == 1 })
	if code, err := fake.Push(fixture(t, "group_mention.json"), 5*time.Second); err != nil || code != http.StatusOK {
		t.Fatalf("push after reconnect: ACK %d, %v", code, err)
	}
	if p := <-got; len(p.Messages) != 1 || !p.Messages[0].Summoned {
		t.Errorf("handed after reconnect %+v", p.Messages)
	}
	if n := readies.Load(); n != 1 {
		t.Errorf("ready called %d times, want once", n)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil on shutdown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if code, _ := fake.Push(event, 5*time.Second); code == http.StatusOK {
		t.Error("an event was accepted after shutdown")
	}
	if len(got) != 0 {
		t.Errorf("%d events handed after shutdown", len(got))
	}
}
