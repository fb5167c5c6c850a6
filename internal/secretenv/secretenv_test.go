package secretenv

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestIsSecret(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"OPENAI_API_KEY":              true,
		"GITHUB_TOKEN":                true,
		"GITHUB_WEBHOOK_SECRET":       true,
		"GITHUB_APP_PRIVATE_KEY":      true,
		"GITHUB_APP_PRIVATE_KEY_FILE": true,
		"FASTAGENT_CODEC_KEYS":        true,
		"FASTAGENT_CODEC_KEY_FILE":    true,
		"FEISHU_ENCRYPT_KEY":          true,
		"TELEGRAM_BOT_TOKEN":          true,
		"TEMPORAL_TLS_KEY":            true,
		"FASTAGENT_TOKENS_FILE":       true,
		"slack_bot_token":             true,
		"PATH":                        false,
		"HOME":                        false,
		"CONFIG_FILE":                 false,
		"_FILE":                       false,
		"GITHUB_APP_ID":               false,
	} {
		if got := IsSecret(name); got != want {
			t.Errorf("IsSecret(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := filepath.Join(dir, "app.pem")
	plain := filepath.Join(dir, "plain.yaml")
	for _, f := range []string{key, plain} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := Files([]string{
		"GITHUB_APP_PRIVATE_KEY_FILE=" + key,
		"FASTAGENT_CODEC_KEY_FILE=" + key, // listed once
		"CONFIG_FILE=" + plain,            // not a secret
		"TEMPORAL_TLS_KEY=" + filepath.Join(dir, "missing.pem"),
		"TEMPORAL_TLS_CA=" + dir, // a directory, not a file
		"OPENAI_API_KEY=sk-not-a-path",
		"MALFORMED",
	})
	real, err := filepath.EvalSymlinks(key)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{real}) {
		t.Errorf("Files = %v, want [%s]", got, real)
	}
}

func TestRedactSecretValues(t *testing.T) {
	env := []string{"OPENAI_API_KEY=sk-live-1234567890", "SLACK_BOT_TOKEN=xoxb-abcdefgh", "SHORT_TOKEN=abc", "HOME=/home/user-with-long-name", "BAD"}
	vals := Values(env)
	if len(vals) != 2 || vals[0] != "sk-live-1234567890" {
		t.Fatalf("Values = %q, want the two long secret values, longest first", vals)
	}
	got, changed := Redact("key sk-live-1234567890 and xoxb-abcdefgh in /home/user-with-long-name abc", vals)
	if !changed || got != "key [redacted] and [redacted] in /home/user-with-long-name abc" {
		t.Fatalf("Redact = %q, %v", got, changed)
	}
	if _, changed := Redact("nothing here", vals); changed {
		t.Fatal("Redact changed a text without secrets")
	}
}
