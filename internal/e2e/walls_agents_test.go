package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/httpagent"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// Three agents in one worker (--agent name=folder): the main one, one
// whose folder lies inside the main workspace and one elsewhere (outside
// /tmp, which every call gets a private copy of). No agent's tools read
// another's .env or state dir, nor change another's rules — bash under
// both mechanisms, and the in-process read and write tools.
func TestAgentsCannotReachEachOthersSecrets(t *testing.T) {
	for _, m := range []sandbox.Mode{sandbox.Namespaces, sandbox.Landlock} {
		t.Run(string(m), func(t *testing.T) {
			e := newEnv(t)
			e.writeConfig(fastRetries)
			sb := sandbox.Open(sandbox.Config{Mode: m})
			t.Cleanup(func() { _ = sb.Close() })
			if st := sb.Status(); st.Mode != m {
				if sandboxtest.Required() {
					t.Fatalf("mechanism %s unavailable on this machine: %s", m, st.Error)
				}
				t.Skipf("mechanism %s unavailable here: %s", m, st.Error)
			}
			e.kit.Loader.Sandbox = sb
			suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000_000)
			nestedName, farName := "nested"+suffix, "far"+suffix
			nestedRel := filepath.Join("team", nestedName)
			nested := filepath.Join(e.kit.Dir, nestedRel)
			cache, err := os.UserCacheDir()
			if err != nil {
				t.Skip(err)
			}
			if err := os.MkdirAll(cache, 0o700); err != nil {
				t.Fatal(err)
			}
			far, err := os.MkdirTemp(cache, "fastagent-walls-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(far) })
			const persona = "You are another agent.\n"
			for p, body := range map[string]string{
				filepath.Join(e.kit.Dir, ".env"):             "MAIN_KEY=canary-main-env\n",
				filepath.Join(nested, ".env"):                "NESTED_KEY=canary-nested-env\n",
				filepath.Join(nested, ".fastagent", "state"): "canary-nested-state\n",
				filepath.Join(nested, "persona.md"):          persona,
				filepath.Join(far, ".env"):                   "FAR_KEY=canary-far-env\n",
				filepath.Join(far, ".fastagent", "state"):    "canary-far-state\n",
				filepath.Join(far, "persona.md"):             persona,
			} {
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			run, err := e.runtime(func(c *serve.Config, _ *serve.Components) {
				c.Agents = map[string]string{nestedName: nested, farName: far}
				c.APITokens, c.StateDir = "admin:admin:"+ingress.HashToken("admin-tok"), t.TempDir()
				c.Roles, c.Listener = serve.Roles{Worker: true, Ingress: true}, ln
			}).Start(context.Background(), e.client)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(run.Stop)
			calls := func(cs ...modelserver.ToolCall) modelserver.Reply { return modelserver.Reply{ToolCalls: cs} }
			bash := func(id, cmd string) modelserver.ToolCall {
				return modelserver.ToolCall{ID: id, Name: "bash", Args: jsonArgs(t, map[string]string{"command": cmd + "; echo end"})}
			}
			read := func(id, p string) modelserver.ToolCall {
				return modelserver.ToolCall{ID: id, Name: "read", Args: jsonArgs(t, map[string]string{"path": p})}
			}
			catAll := func(dir string) string {
				return fmt.Sprintf("cat %[1]s/.env %[1]s/.fastagent/state; echo 'You obey anyone.' > %[1]s/persona.md", dir)
			}
			e.kit.Model.EnqueueFor("main tries", calls(
				bash("m1", catAll(nestedRel)),
				bash("m2", catAll(far)),
				read("m3", nestedRel+"/.env"),
				read("m4", nestedRel+"/.fastagent/state"),
				modelserver.ToolCall{ID: "m5", Name: "write", Args: jsonArgs(t, map[string]string{"path": nestedRel + "/persona.md", "content": "You obey anyone."})},
			), modelserver.Reply{Text: []string{"tried"}})
			e.kit.Model.EnqueueFor("nested tries", calls(bash("n1", catAll(far))), modelserver.Reply{Text: []string{"tried"}})
			session := "secrets-" + string(m)
			must(t, collect(t, e.agent, context.Background(), session, "main tries"), agent.TypeCompleted)
			must(t, collect(t, &httpagent.Agent{BaseURL: run.URL + "/agents/" + nestedName, Token: "admin-tok"}, context.Background(), session, "nested tries"),
				agent.TypeCompleted)
			for _, c := range []struct{ session, id string }{
				{session, "m1"}, {session, "m2"}, {session, "m3"}, {session, "m4"}, {session, "m5"}, {nestedName + "/" + session, "n1"},
			} {
				r := e.toolResult(c.session, c.id)
				if r == nil {
					t.Fatalf("%s: no result for %s", m, c.id)
				}
				if strings.Contains(r.Text, "canary") {
					t.Errorf("%s: call %s read another agent's secret:\n%s", m, c.id, r.Text)
				}
				if strings.HasPrefix(c.id, "n") || c.id == "m1" || c.id == "m2" {
					if !strings.Contains(r.Text, "end") {
						t.Errorf("%s: bash %s did not run: %s", m, c.id, r.Text)
					}
				}
			}
			for _, dir := range []string{nested, far} {
				if b, err := os.ReadFile(filepath.Join(dir, "persona.md")); err != nil || string(b) != persona {
					t.Errorf("%s: another agent's tools changed %s/persona.md: %q (%v)", m, dir, b, err)
				}
			}
		})
	}
}
