package feishu_test

import (
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/wire"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestNew(t *testing.T) {
	t.Parallel()
	feishuEnv := map[string]string{"FEISHU_APP_ID": "cli_1", "FEISHU_APP_SECRET": "s", "FEISHU_VERIFICATION_TOKEN": "tok"}
	cases := []struct {
		name    string
		profile feishu.Profile
		file    string
		env     map[string]string
		// wantErr is a substring of the error; "" = no error.
		wantErr string
		check   func(t *testing.T, ch *channels.Channel)
	}{
		{name: "webhook defaults", profile: feishu.Feishu(), env: feishuEnv, check: func(t *testing.T, ch *channels.Channel) {
			d := ch.Door.(*feishu.Door)
			if d.Path() != "/feishu" || d.Kind() != "feishu" || d.Token != "tok" || d.EncryptKey != "" || ch.Conn != nil || ch.Replier.Kind() != "feishu" {
				t.Errorf("door %+v conn %v", d, ch.Conn)
			}
		}},
		{name: "lark profile", profile: feishu.Lark(),
			env: map[string]string{"LARK_APP_ID": "cli_1", "LARK_APP_SECRET": "s", "LARK_VERIFICATION_TOKEN": "tok", "LARK_ENCRYPT_KEY": "k"},
			check: func(t *testing.T, ch *channels.Channel) {
				d := ch.Door.(*feishu.Door)
				if d.Path() != "/lark" || d.Kind() != "lark" || d.EncryptKey != "k" || d.Profile.BaseURL != "https://open.larksuite.com" {
					t.Errorf("door %+v", d)
				}
			}},
		{name: "lark profile does not read FEISHU_ variables", profile: feishu.Lark(), env: feishuEnv, wantErr: "LARK_APP_ID is not set"},
		{name: "renamed variables and policy", profile: feishu.Feishu(),
			file: "appIdEnv: MY_ID\nappSecretEnv: MY_SECRET\nverificationTokenEnv: MY_TOKEN\nencryptKeyEnv: MY_KEY\n" +
				"directMessageSession: continuous\ngroupMessageSession: continuous\ngroupMode: context\nbotOpenId: ou_b\n",
			env: map[string]string{"MY_ID": "cli_1", "MY_SECRET": "s", "MY_TOKEN": "tok", "MY_KEY": "k"},
			check: func(t *testing.T, ch *channels.Channel) {
				d := ch.Door.(*feishu.Door)
				want := wire.ChatPolicy{DirectSession: "continuous", GroupSession: "continuous", GroupMode: "context"}
				if d.Token != "tok" || d.EncryptKey != "k" || d.Policy != want {
					t.Errorf("door %+v", d)
				}
			}},
		{name: "websocket needs no token", profile: feishu.Feishu(), file: "transport: websocket\n",
			env: map[string]string{"FEISHU_APP_ID": "cli_1", "FEISHU_APP_SECRET": "s"},
			check: func(t *testing.T, ch *channels.Channel) {
				if ch.Conn == nil || ch.Door.Path() != "" {
					t.Errorf("websocket channel: conn %v, path %q", ch.Conn, ch.Door.Path())
				}
			}},
		{name: "base URL override", profile: feishu.Feishu(), env: map[string]string{"FEISHU_APP_ID": "cli_1", "FEISHU_APP_SECRET": "s",
			"FEISHU_VERIFICATION_TOKEN": "tok", "FEISHU_BASE_URL": "http://127.0.0.1:9/"},
			check: func(t *testing.T, ch *channels.Channel) {
				if u := ch.Door.(*feishu.Door).Profile.BaseURL; u != "http://127.0.0.1:9" {
					t.Errorf("base URL %q", u)
				}
			}},
		{name: "bad base URL", profile: feishu.Feishu(), env: map[string]string{"FEISHU_APP_ID": "cli_1", "FEISHU_APP_SECRET": "s",
			"FEISHU_VERIFICATION_TOKEN": "tok", "FEISHU_BASE_URL": "open.feishu.cn"}, wantErr: "FEISHU_BASE_URL"},
		{name: "unknown key", profile: feishu.Feishu(), file: "groupSession: thread\n", env: feishuEnv, wantErr: "groupSession"},
		{name: "bad transport", profile: feishu.Feishu(), file: "transport: grpc\n", env: feishuEnv, wantErr: "transport"},
		{name: "admins", profile: feishu.Feishu(), file: "admins: [ou_84aad35d084aa403a838cf73ee18467]\n", env: feishuEnv,
			check: func(t *testing.T, ch *channels.Channel) {
				if d := ch.Door.(*feishu.Door); len(d.Admins) != 1 || d.Admins[0] != "ou_84aad35d084aa403a838cf73ee18467" {
					t.Errorf("door admins %q", d.Admins)
				}
			}},
		{name: "an admin that is no open_id", profile: feishu.Feishu(), file: "admins: ['<at id=all></at>']\n", env: feishuEnv, wantErr: "admins[0]"},
		{name: "bad group mode", profile: feishu.Feishu(), file: "groupMode: all\n", env: feishuEnv, wantErr: "groupMode"},
		{name: "bad session", profile: feishu.Feishu(), file: "directMessageSession: forever\n", env: feishuEnv, wantErr: "directMessageSession"},
		{name: "webhook without token", profile: feishu.Feishu(), env: map[string]string{"FEISHU_APP_ID": "cli_1", "FEISHU_APP_SECRET": "s"},
			wantErr: "FEISHU_VERIFICATION_TOKEN is not set"},
		{name: "named encrypt key missing", profile: feishu.Feishu(), file: "encryptKeyEnv: MY_KEY\n", env: feishuEnv, wantErr: "MY_KEY is not set"},
		{name: "no app secret", profile: feishu.Feishu(), env: map[string]string{"FEISHU_APP_ID": "cli_1"}, wantErr: "FEISHU_APP_SECRET"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ch, err := feishu.New(c.profile, []byte(c.file), env(c.env), nil)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("New = %v, want an error with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, ch)
		})
	}
}

func TestKindsRegistered(t *testing.T) {
	t.Parallel()
	kinds := strings.Join(channels.Kinds(), ",")
	for _, k := range []string{feishu.KindFeishu, feishu.KindLark} {
		if !strings.Contains(kinds, k) {
			t.Errorf("kind %s not registered (%s)", k, kinds)
		}
	}
}

// TestNewFileConfig: maxFileBytes bounds downloads; a negative value is
// refused naming the key.
func TestNewFileConfig(t *testing.T) {
	t.Parallel()
	e := env(map[string]string{"FEISHU_APP_ID": "cli", "FEISHU_APP_SECRET": "s", "FEISHU_VERIFICATION_TOKEN": "tok"})
	if _, err := feishu.New(feishu.Feishu(), []byte("maxFileBytes: -1\n"), e, nil); err == nil || !strings.Contains(err.Error(), "maxFileBytes") {
		t.Errorf("negative maxFileBytes: %v, want an error naming the key", err)
	}
	ch, err := feishu.New(feishu.Feishu(), []byte("maxFileBytes: 1048576\n"), e, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rp := ch.Replier.(*feishu.Replier); rp.Files.MaxFileBytes != 1<<20 {
		t.Errorf("MaxFileBytes = %d, want 1 MiB", rp.Files.MaxFileBytes)
	}
	if _, ok := ch.Replier.(channels.Fetcher); !ok {
		t.Error("the replier does not fetch files")
	}
}
