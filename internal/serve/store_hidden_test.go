package serve

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
)

// A SQLite session store outside the state dir (--store /srv/fa/sessions.db,
// FASTAGENT_STORE=sessions.db in the workspace) holds every session's
// transcript, other principals' and other agents' included: no tool reads
// it, its write-ahead log or its shared memory, as none reads the state
// dir, in both modes.
func TestToolsCannotReadTheStore(t *testing.T) {
	for _, m := range []sandbox.Mode{sandbox.Namespaces, sandbox.Landlock} {
		t.Run(string(m), func(t *testing.T) {
			if st := sandbox.Open(sandbox.Config{Mode: m}); st.Status().Mode != m {
				_ = st.Close()
				if sandboxtest.Required() {
					t.Fatalf("%s unavailable: %s", m, st.Status().Error)
				}
				t.Skipf("%s unavailable here: %s", m, st.Status().Error)
			} else {
				_ = st.Close()
			}
			// Outside /tmp, which a sandboxed process gets a private copy of.
			cache, err := os.UserCacheDir()
			if err != nil {
				t.Skip(err)
			}
			if err := os.MkdirAll(cache, 0o700); err != nil {
				t.Fatal(err)
			}
			base, err := os.MkdirTemp(cache, "fastagent-store-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(base) })
			dir := filepath.Join(base, "ws")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "fastagent.yaml"), []byte("model: openai/gpt-4o-mini\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for name, st := range map[string]string{"elsewhere": filepath.Join(base, "srv", "sessions.db"), "in the workspace": filepath.Join(dir, "sessions.db")} {
				t.Run(name, func(t *testing.T) {
					env := map[string]string{"FASTAGENT_SANDBOX": string(m)}
					p, err := Open(context.Background(), Config{Dir: dir, Store: st, Getenv: func(k string) string { return env[k] }})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(p.Close)
					if err := p.openSandbox(context.Background()); err != nil {
						t.Fatal(err)
					}
					var out bytes.Buffer
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					proc, err := p.Sandbox.Start(ctx, &sandbox.Cmd{Path: "/bin/sh", Args: []string{"sh", "-c", `for f in "$0" "$0-wal" "$0-shm"; do head -c 15 "$f"; echo " $f"; done 2>&1`, st},
						Dir: dir, Writable: []string{dir}, Stdout: &out, Stderr: &out, Env: []string{"PATH=/usr/bin:/bin"}})
					if err != nil {
						t.Fatal(err)
					}
					_ = proc.Wait()
					if strings.Contains(out.String(), "SQLite format") {
						t.Errorf("a tool read the session store %s:\n%s", st, out.String())
					}
				})
			}
		})
	}
}
