package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
)

// The bench's Feishu app secrets.
const (
	benchFeishuToken = "bench-verification-token" //nolint:gosec // G101: a test secret
	benchFeishuKey   = "bench-encrypt-key"        //nolint:gosec // G101: a test secret
)

// 9. Feishu: im.message.receive_v1 events, each a p2p message owning its
// own session, one after another, over both transports against the fake
// open platform. Webhook: encrypted and signed over real HTTP to the door,
// which verifies, decrypts and hands the event to Temporal (Signal-With-
// Start) before its ACK. Websocket: the fake pushes the event frame over
// the long connection (the SDK's larkws client through serve.RunConnectors)
// and the figure ends when the ACK frame is back. Each event waits for the
// previous one's card, so turns do not pile up. First card is from
// sending the webhook to the fake receiving the reply that posts the card.
func (b *bench) feishuFigures() error {
	fake := fakefeishu.New()
	defer fake.Close()
	q := lab.NewQueue("feishu")
	p := feishu.Feishu()
	p.BaseURL = fake.URL
	vars := map[string]string{"FEISHU_APP_ID": "cli_bench", "FEISHU_APP_SECRET": "bench-secret", "FEISHU_BASE_URL": fake.URL}
	ws, err := feishu.New(p, []byte("transport: websocket\n"), func(k string) string { return vars[k] }, lab.QuietLogger())
	if err != nil {
		return err
	}
	rp := ws.Replier
	w, err := lab.StartWorker(b.c, b.kit, b.busD, q, func(_ *serve.Config, w *serve.Components) { w.Repliers = []channels.Replier{rp} })
	if err != nil {
		return err
	}
	defer w.Stop()
	d := &feishu.Door{Profile: p, Token: benchFeishuToken, EncryptKey: benchFeishuKey, Webhook: true, Bot: feishu.NewBot(fake.BotOpenID, nil)}
	door := httptest.NewServer(channels.Handler(d, b.c, q, lab.QuietLogger()))
	defer door.Close()

	const warm = 5
	chat := "oc_bench" + b.run
	var ack, first lab.Sample
	for i := 0; i < warm+b.f.feishuN; i++ {
		id := fmt.Sprintf("om_bench%s_w%d", b.run, i)
		body, err := sealedFeishuEvent(chat, id, fmt.Sprintf("feishu bench %d", i))
		if err != nil {
			return err
		}
		sent := time.Now()
		if err := postFeishu(door.URL+p.Path, body); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		acked := time.Since(sent)
		at, err := firstFeishuCard(fake, id, time.Minute)
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		if i >= warm {
			ack = append(ack, acked)
			first = append(first, at.Sub(sent))
		}
		b.prog.Printf("%d/%d webhook events", max(0, i+1-warm), b.f.feishuN)
	}

	webhookCards := fake.Cards()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	errc := serve.RunConnectors(ctx, []*channels.Channel{ws}, b.c, q, func() { close(ready) }, lab.QuietLogger())
	select {
	case <-ready:
	case err := <-errc:
		return fmt.Errorf("long connection: %w", err)
	case <-time.After(30 * time.Second):
		return fmt.Errorf("long connection: not connected within 30s")
	}
	var wsAck lab.Sample
	for i := 0; i < warm+b.f.feishuN; i++ {
		id := fmt.Sprintf("om_bench%s_s%d", b.run, i)
		sent := time.Now()
		code, err := fake.Push(feishuBenchEvent(chat, id, fmt.Sprintf("feishu ws bench %d", i)), 10*time.Second)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("push %d: ACK %d: %w", i, code, err)
		}
		if i >= warm {
			wsAck = append(wsAck, time.Since(sent))
		}
		// As for the webhook, the next event waits for this one's card.
		if _, err := firstFeishuCard(fake, id, time.Minute); err != nil {
			return fmt.Errorf("push %d: %w", i, err)
		}
		b.prog.Printf("%d/%d websocket events", max(0, i+1-warm), b.f.feishuN)
	}

	label := sectionLabel("feishu")
	ackName := "webhook → ACK (signed+encrypted, Signal-With-Start)"
	firstName := "webhook → first card at fake Feishu"
	wsName := "websocket push → ACK frame (Signal-With-Start)"
	b.rows = append(b.rows,
		row{Figure: label, Variant: ackName, N: len(ack), P50: ack.P50(), P99: ack.P99(),
			Goal: "< 3 s p99 (the platform's budget)", Met: met(ack.P99() < 3*time.Second)},
		row{Figure: label, Variant: firstName, N: len(first), P50: first.P50(), P99: first.P99(),
			Result: fmt.Sprintf("%d cards for %d webhook events", webhookCards, warm+b.f.feishuN)},
		row{Figure: label, Variant: wsName, N: len(wsAck), P50: wsAck.P50(), P99: wsAck.P99(),
			Goal: "< 3 s p99 (the platform's budget)", Met: met(wsAck.P99() < 3*time.Second)},
	)
	b.addDist(label, ackName, ack)
	b.addDist(label, firstName, first)
	b.addDist(label, wsName, wsAck)
	return nil
}

// feishuBenchEvent is a user's p2p text message as im.message.receive_v1
// (schema 2.0).
func feishuBenchEvent(chat, id, text string) []byte {
	content, _ := json.Marshal(map[string]string{"text": text})
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	body, _ := json.Marshal(map[string]any{
		"schema": "2.0",
		"header": map[string]any{"event_id": "ev_" + id, "event_type": feishu.EventMessageReceive, "token": benchFeishuToken,
			"create_time": now, "app_id": "cli_bench", "tenant_key": "tk_bench"},
		"event": map[string]any{
			"sender": map[string]any{"sender_id": map[string]any{"open_id": "ou_bench_user"}, "sender_type": "user"},
			"message": map[string]any{"message_id": id, "chat_id": chat, "chat_type": "p2p", "message_type": "text",
				"content": string(content), "create_time": now},
		},
	})
	return body
}

// sealedFeishuEvent is feishuBenchEvent encrypted with the bench's Encrypt
// Key, as the platform sends it.
func sealedFeishuEvent(chat, id, text string) ([]byte, error) {
	enc, err := feishu.Encrypt(benchFeishuKey, feishuBenchEvent(chat, id, text))
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]string{"encrypt": enc})
}

// postFeishu posts body signed as the platform signs it; anything but 200
// is an error.
func postFeishu(url string, body []byte) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = feishu.Sign(benchFeishuKey, time.Now(), strconv.FormatInt(time.Now().UnixNano(), 36), body)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("door answered %s", resp.Status)
	}
	return nil
}

// firstFeishuCard waits for the reply to message id (the card's post) and
// returns when the fake received it.
func firstFeishuCard(fake *fakefeishu.Server, id string, limit time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	suffix := "/messages/" + id + "/reply"
	for {
		for _, c := range fake.Calls("im.reply") {
			if strings.HasSuffix(c.Path, suffix) {
				return c.At, nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no reply to %s within %s", id, limit)
		case <-time.After(2 * time.Millisecond):
		}
	}
}
