package serve

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/fastagent/fastagent/internal/channels/slack"
)

// TestOpenChannelTools: an enabled channel's tools join the definition
// (slack_send_file with channels/slack.yaml), and only then.
func TestOpenChannelTools(t *testing.T) {
	t.Parallel()
	for _, enabled := range []bool{true, false} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "channels"), 0o755); err != nil {
			t.Fatal(err)
		}
		name := "slack.yaml"
		if !enabled {
			name += ".disabled"
		}
		if err := os.WriteFile(filepath.Join(dir, "channels", name), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := Open(context.Background(), Config{Dir: dir, Logger: slog.Default(), Getenv: func(k string) string {
			return map[string]string{"SLACK_SIGNING_SECRET": "sec", "SLACK_BOT_TOKEN": "xoxb"}[k]
		}})
		if err != nil {
			t.Fatal(err)
		}
		def, err := p.Loader.Load(context.Background())
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := def.Tool(slack.SendFileName); ok != enabled {
			t.Errorf("channel enabled=%v: %s defined = %v", enabled, slack.SendFileName, ok)
		}
	}
}
