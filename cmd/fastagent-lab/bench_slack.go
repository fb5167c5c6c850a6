package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
)

// benchSlackSecret signs the bench's webhook deliveries.
const benchSlackSecret = "bench-signing-secret" //nolint:gosec // G101: a test secret

// 8. Slack: signed Events API deliveries to the Slack door over real HTTP,
// each an app_mention starting its own thread, one after another. ACK is
// the door's response time; first text is from sending the webhook to the
// fake Slack Web API receiving the reply's first text (chat.startStream
// with text, or chat.postMessage).
func (b *bench) slackFigures() error {
	fake := fakeslack.New()
	defer fake.Close()
	q := lab.NewQueue("slack")
	rp := slack.NewReplier("xoxb-bench", fake.APIURL())
	rp.Logger = lab.QuietLogger()
	w, err := lab.StartWorker(b.c, b.kit, b.busD, q, func(_ *serve.Config, w *serve.Components) { w.Repliers = []channels.Replier{rp} })
	if err != nil {
		return err
	}
	defer w.Stop()
	door := httptest.NewServer(channels.Handler(&slack.Door{SigningSecret: benchSlackSecret}, b.c, q, lab.QuietLogger()))
	defer door.Close()

	const warm, channel = 5, "C0BENCH"
	team := "T" + b.run
	var ack, first lab.Sample
	for i := 0; i < warm+b.f.slackN; i++ {
		ts := fmt.Sprintf("1700000000.%06d", i+1)
		body := slackMention(team, channel, ts, fmt.Sprintf("Ev%s%d", b.run, i), fmt.Sprintf("<@U0BENCHBOT> slack bench %d", i))
		sent := time.Now()
		if err := postSigned(door.URL+slack.Path, body); err != nil {
			return fmt.Errorf("delivery %d: %w", i, err)
		}
		acked := time.Since(sent)
		at, err := firstReplyText(fake, ts, time.Minute)
		if err != nil {
			return fmt.Errorf("delivery %d: %w", i, err)
		}
		if i >= warm {
			ack = append(ack, acked)
			first = append(first, at.Sub(sent))
		}
		b.prog.Printf("%d/%d deliveries", max(0, i+1-warm), b.f.slackN)
	}
	streams := 0
	for _, m := range fake.Messages(channel) {
		if m.Stream {
			streams++
		}
	}
	label := sectionLabel("slack")
	ackName := "webhook → ACK (signed, Signal-With-Start)"
	firstName := "webhook → first text at fake Slack"
	b.rows = append(b.rows,
		row{Figure: label, Variant: ackName, N: len(ack), P50: ack.P50(), P99: ack.P99(),
			Goal: "< 3 s p99 (Slack's ACK budget)", Met: met(ack.P99() < 3*time.Second)},
		row{Figure: label, Variant: firstName, N: len(first), P50: first.P50(), P99: first.P99(),
			Result: fmt.Sprintf("%d of %d replies streamed natively (chat.startStream)", streams, warm+b.f.slackN)},
	)
	b.addDist(label, ackName, ack)
	b.addDist(label, firstName, first)
	return nil
}

// slackMention is an app_mention Events API callback in Slack's shape.
func slackMention(team, channel, ts, eventID, text string) []byte {
	body, _ := json.Marshal(map[string]any{
		"token": "bench", "team_id": team, "api_app_id": "A0BENCH", "type": "event_callback",
		"event_id": eventID, "event_time": time.Now().Unix(),
		"event": map[string]any{"type": "app_mention", "user": "U0BENCHUSR", "text": text, "ts": ts,
			"channel": channel, "event_ts": ts},
		"authorizations": []map[string]any{{"team_id": team, "user_id": "U0BENCHBOT", "is_bot": true}},
	})
	return body
}

// postSigned posts body to url signed as Slack signs it; anything but 200
// is an error.
func postSigned(url string, body []byte) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = slack.Sign(benchSlackSecret, time.Now(), body)
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

// firstReplyText waits for the first reply call in thread carrying text
// and returns when the fake received it.
func firstReplyText(fake *fakeslack.Server, thread string, limit time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		for _, c := range fake.Calls("chat.startStream", "chat.postMessage") {
			if c.Get("thread_ts") == thread && (c.Get("markdown_text") != "" || c.Get("text") != "") {
				return c.At, nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no reply in thread %s within %s", thread, limit)
		case <-time.After(2 * time.Millisecond):
		}
	}
}
