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
