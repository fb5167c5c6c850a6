package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/channels/feishu"
)

// TestAddFeishu: add feishu|lark writes a channel file the channel loads
// with the transport asked for (flag or answer), prints the scopes, the
// event subscription, the console steps and the environment variables,
// and refuses to overwrite without --force.
func TestAddFeishu(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		stdin     string
		profile   feishu.Profile
		transport string
		context   bool
		want      []string
		notWant   []string
	}{
		{name: "feishu webhook by flag", args: []string{"add", "feishu", "--webhook"}, profile: feishu.Feishu(), transport: feishu.TransportWebhook,
			want: []string{"https://open.feishu.cn/app", "https://<your host>/feishu", "FEISHU_VERIFICATION_TOKEN=", "FEISHU_ENCRYPT_KEY=",
				"im:message.group_msg", "not needed in mentions mode"},
			notWant: []string{"How should"}},
		{name: "lark websocket by answer", args: []string{"add", "lark"}, stdin: "2\n", profile: feishu.Lark(), transport: feishu.TransportWebsocket,
			want:    []string{"How should Lark deliver events?", "https://open.larksuite.com/app", "persistent connection", "LARK_APP_ID=", "LARK_APP_SECRET="},
			notWant: []string{"LARK_VERIFICATION_TOKEN=", "Request URL"}},
		{name: "feishu websocket, context mode", args: []string{"add", "feishu", "--websocket", "--context"}, profile: feishu.Feishu(),
			transport: feishu.TransportWebsocket, context: true, notWant: []string{"not needed in mentions mode"}},
		{name: "no answer: webhook", args: []string{"add", "feishu"}, profile: feishu.Feishu(), transport: feishu.TransportWebhook,
			want: []string{"Choice [1]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out, errOut, code := execute(t, c.stdin, append(c.args, "--dir", dir)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			common := []string{"Wrote ", "im:message ", "im:message.p2p_msg:readonly", "im:message.group_at_msg:readonly", "im:resource",
				"cardkit:card:write", feishu.EventMessageReceive, feishu.EventCardAction, "Callback Configuration", "Bot capability", "publish", "make dev"}
			for _, w := range append(common, c.want...) {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			file, err := os.ReadFile(filepath.Join(dir, "channels", c.profile.Kind+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{c.profile.Env("APP_ID"): "cli_x", c.profile.Env("APP_SECRET"): "s", c.profile.Env("VERIFICATION_TOKEN"): "tok"}
			ch, err := feishu.New(c.profile, file, func(k string) string { return env[k] }, nil)
			if err != nil {
				t.Fatalf("the written file does not load: %v\n%s", err, file)
			}
			d := ch.Door.(*feishu.Door)
			if got := d.Webhook; got != (c.transport == feishu.TransportWebhook) || (ch.Conn != nil) == d.Webhook {
				t.Errorf("transport: webhook %v, conn %v; want %s", d.Webhook, ch.Conn != nil, c.transport)
			}
			if (d.Policy.GroupMode == "context") != c.context {
				t.Errorf("groupMode %q, want context %v", d.Policy.GroupMode, c.context)
			}
		})
	}
}

// TestAddFeishuRefuses: an existing file is kept without --force, two
// transports or an unknown answer are usage errors and write nothing.
func TestAddFeishuRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "channels", "feishu.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("transport: websocket\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := execute(t, "", "add", "feishu", "--webhook", "--dir", dir); code != exitUsage || !strings.Contains(errOut, "--force") {
		t.Errorf("overwrite without --force: exit %d, %q; want a usage error naming --force", code, errOut)
	}
	if b, _ := os.ReadFile(path); string(b) != "transport: websocket\n" {
		t.Errorf("the existing file changed: %q", b)
	}
	if _, errOut, code := execute(t, "", "add", "feishu", "--webhook", "--force", "--dir", dir); code != 0 {
		t.Fatalf("--force: exit %d: %s", code, errOut)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "transport: webhook") {
		t.Errorf("--force did not overwrite: %q", b)
	}
	other := t.TempDir()
	for _, c := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"add", "lark", "--webhook", "--websocket"}},
		{"carrier pigeon\n", []string{"add", "lark"}},
	} {
		if _, errOut, code := execute(t, c.stdin, append(c.args, "--dir", other)...); code != exitUsage {
			t.Errorf("%v with %q: exit %d (%s), want a usage error", c.args, c.stdin, code, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(other, "channels")); err == nil {
		t.Error("a refused add wrote files")
	}
}
