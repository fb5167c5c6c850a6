package feishu_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
)

// nopStarter accepts every hand-off at once (the door's own cost only).
type nopStarter struct{}

func (nopStarter) SignalWithStartWorkflow(context.Context, string, string, interface{},
	client.StartWorkflowOptions, interface{}, ...interface{}) (client.WorkflowRun, error) {
	return nil, nil
}

// report prints the p50/p99 of a latency sample.
func report(b *testing.B, what string, took []time.Duration) {
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	n := len(took)
	b.ReportMetric(float64(took[n/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[(n*99+99)/100-1].Microseconds()), "p99-µs")
	b.Logf("%s over %d events: p50 %s, p99 %s", what, n, took[n/2], took[(n*99+99)/100-1])
}

// BenchmarkWebhookAck: a signed, encrypted event through the HTTP handler
// (cap, verify, decrypt, parse, hand-off to a no-op Temporal) to its ACK.
func BenchmarkWebhookAck(b *testing.B) {
	d := door(encKey)
	srv := httptest.NewServer(channels.Handler(d, nopStarter{}, "q", nil))
	defer srv.Close()
	event := mustRead(b, "group_mention.json")
	enc, _ := feishu.Encrypt(encKey, event)
	body := []byte(`{"encrypt":"` + enc + `"}`)
	took := make([]time.Duration, 0, b.N)
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		req.Header = feishu.Sign(encKey, time.Now(), "nonce", body)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("POST: %v %v", err, resp)
		}
		resp.Body.Close()
		took = append(took, time.Since(start))
	}
	report(b, "webhook event → ACK", took)
}

// BenchmarkWebsocketAck: an event pushed over the long connection (the
// SDK's client against the fake) to its ACK frame, hand-off a no-op.
func BenchmarkWebsocketAck(b *testing.B) {
	if sdkRace {
		b.Skip("the SDK's larkws client has data races of its own (see race_on_test.go)")
	}
	fake := fakefeishu.New()
	defer fake.Close()
	p := feishu.Feishu()
	p.BaseURL = fake.URL
	conn := &feishu.Conn{Door: &feishu.Door{Profile: p, Bot: feishu.NewBot(bot, nil)}, AppID: "cli_bench", AppSecret: "s"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	go func() {
		_ = conn.Run(ctx, func(context.Context, channels.Parsed) error { return nil }, func() { close(ready) })
	}()
	<-ready
	event := mustRead(b, "group_mention.json")
	took := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		code, err := fake.Push(event, 5*time.Second)
		if err != nil || code != http.StatusOK {
			b.Fatalf("push: %d %v", code, err)
		}
		took = append(took, time.Since(start))
	}
	report(b, "websocket event → ACK", took)
}

func mustRead(b *testing.B, name string) []byte {
	b.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		b.Fatal(err)
	}
	return data
}
