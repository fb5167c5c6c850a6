package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/webhook"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/workflows"
)

// benchHookSecret signs the bench's webhook deliveries.
const benchHookSecret = "whsec_YmVuY2gtd2ViaG9vay1zaWduaW5nLXNlY3JldA==" //nolint:gosec // G101: a test secret

// 10. Webhook endpoint: Standard Webhooks-signed events POSTed one after
// another to a channels/webhooks/<name>.yaml endpoint over real HTTP, each
// starting its own session, with no worker on the task queue: the ACK
// (202) is the door's response time — verify, map, Signal-With-Start —
// and never waits for a worker. Timed through the same metrics wrapper
// that serves fastagent_webhook_ack_seconds.
func (b *bench) webhookFigures() error {
	q := lab.NewQueue("webhook")
	name := "bench" + b.run
	yaml := "scheme: standard\nsecretEnv: BENCH_HOOK_SECRET\nsession: \"hook:" + name + ":{{.body.n}}\"\nprompt: \"event {{.body.n}}\"\n"
	ch, err := webhook.New(name, []byte(yaml), func(string) string { return benchHookSecret })
	if err != nil {
		return err
	}
	m := metrics.New()
	h := m.WrapDoor(ch.Door.Kind(), ch.Door.(channels.Served).Handler(b.c, q, lab.QuietLogger(), nil))
	door := httptest.NewServer(h)
	defer door.Close()
	const warm = 5
	var ack lab.Sample
	var sessions []string
	for i := 0; i < warm+b.f.webhookN; i++ {
		body := []byte(fmt.Sprintf(`{"type":"bench","n":%d}`, i))
		hdr, err := webhook.SignStandard([]string{benchHookSecret}, fmt.Sprintf("msg_%s_%d", b.run, i), time.Now(), body)
		if err != nil {
			return err
		}
		req, _ := http.NewRequest(http.MethodPost, door.URL, bytes.NewReader(body))
		req.Header = hdr
		sent := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("delivery %d: %w", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		acked := time.Since(sent)
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("delivery %d: door answered %s", i, resp.Status)
		}
		sessions = append(sessions, fmt.Sprintf("hook:%s:%d", name, i))
		if i >= warm {
			ack = append(ack, acked)
		}
		b.prog.Printf("%d/%d deliveries", max(0, i+1-warm), b.f.webhookN)
	}
	for _, s := range sessions {
		_ = b.c.TerminateWorkflow(context.Background(), workflows.WorkflowID(s), "", "bench over")
	}
	label := sectionLabel("webhook")
	ackName := "signed event → 202 (verify, map, Signal-With-Start; no worker)"
	b.rows = append(b.rows, row{Figure: label, Variant: ackName, N: len(ack), P50: ack.P50(), P99: ack.P99(),
		Goal: "≤ 50 ms p99", Met: met(ack.P99() <= 50*time.Millisecond)})
	b.addDist(label, ackName, ack)
	return nil
}
