package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/channels/telegram"
	"github.com/fastagent/fastagent/internal/testsupport/faketelegram"
)

// TestAddTelegram: add telegram writes a channel file the channel loads
// with the transport asked for, prints the BotFather steps and the
// environment, and refuses to overwrite without --force.
func TestAddTelegram(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		transport string
		want      []string
		notWant   []string
	}{
		{"webhook", []string{"add", "telegram"}, telegram.TransportWebhook,
			[]string{"@BotFather", "/setprivacy", telegram.EnvSecret + "=", "--set-webhook https://<your host>"}, nil},
		{"polling, mentions", []string{"add", "telegram", "--polling", "--mentions"}, telegram.TransportPolling,
			[]string{"polls"}, []string{telegram.EnvSecret + "=", "/setprivacy"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out, errOut, code := execute(t, "", append(c.args, "--dir", dir)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range append([]string{"Wrote ", telegram.EnvBotToken + "=", "/stop"}, c.want...) {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			file, err := os.ReadFile(filepath.Join(dir, "channels", "telegram.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{telegram.EnvBotToken: "1:x", telegram.EnvSecret: "s"}
			ch, err := telegram.New(file, func(k string) string { return env[k] }, nil)
			if err != nil {
				t.Fatalf("the written file does not load: %v\n%s", err, file)
			}
			if (ch.Conn != nil) != (c.transport == telegram.TransportPolling) {
				t.Errorf("transport: conn %v, want %s", ch.Conn, c.transport)
			}
			if _, errOut, code := execute(t, "", append(c.args, "--dir", dir)...); code == 0 || !strings.Contains(errOut, "--force") {
				t.Errorf("second run: exit %d, %q; want a refusal naming --force", code, errOut)
			}
		})
	}
}

// TestAddTelegramSetWebhook: --set-webhook checks the token with getMe and
// registers <url>/telegram with the secret token; without the secrets in
// the environment it refuses and writes nothing.
func TestAddTelegramSetWebhook(t *testing.T) {
	fake := faketelegram.New("1:tok")
	defer fake.Close()
	dir := t.TempDir()
	env := map[string]string{telegram.EnvBotToken: "1:tok", telegram.EnvSecret: "sec_1", telegram.EnvAPIURL: fake.URL}
	var out bytes.Buffer
	err := runAddTelegram(context.Background(), dir, addTelegramOptions{setWebhook: "https://bot.example.com/"}, func(k string) string { return env[k] }, &out)
	if err != nil {
		t.Fatal(err)
	}
	calls := fake.Calls("setWebhook")
	if fake.Webhook() != "https://bot.example.com/telegram" || len(calls) != 1 || calls[0].Params["secret_token"] != "sec_1" {
		t.Errorf("webhook %q, calls %+v", fake.Webhook(), calls)
	}
	if !strings.Contains(out.String(), "@"+faketelegram.BotUsername) {
		t.Errorf("output %q", out.String())
	}
	dir2 := t.TempDir()
	err = runAddTelegram(context.Background(), dir2, addTelegramOptions{setWebhook: "https://bot.example.com"}, func(string) string { return "" }, &out)
	if err == nil {
		t.Error("--set-webhook without secrets accepted")
	}
	if _, err := os.Stat(filepath.Join(dir2, "channels", "telegram.yaml")); err == nil {
		t.Error("a refused run wrote the channel file")
	}
}
