package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/egress"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
)

// The walls, end to end: a real worker runs the model's tool calls — bash,
// a workspace tool and an MCP stdio server — under each mechanism this
// machine has, and each tries to reach the control plane (the Temporal
// frontend, a Web UI, the ingress, cloud metadata) with the network off and
// on, to approve its own gated call, to plant files outside the workspace
// and to read secrets. Every attack fails; the unconfined control (tools.
// sandbox: off) shows each one works without the sandbox.

// wallsTargets are the addresses no tool may reach, by what they stand for.
type wallsTargets struct {
	frontend, ui, ingress string
	external              *httptest.Server // an internet host, reached by name
}

// probeScript tries a TCP connection to each address directly and an HTTP
// request through the proxy (when the call has one), and prints one line
// per attempt: OPEN/CLOSED or the HTTP status.
func probeScript(addrs ...string) string {
	var b strings.Builder
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		fmt.Fprintf(&b, "if (exec 3<>/dev/tcp/%s/%s) 2>/dev/null; then echo 'OPEN %s'; else echo 'CLOSED %s'; fi\n", host, port, a, a)
		fmt.Fprintf(&b, "echo \"VIA-PROXY %s $(curl -s -o /dev/null -m 5 -w '%%{http_code}' http://%s/ 2>&1)\"\n", a, a)
	}
	return b.String()
}

// reached returns the addresses a probe's output shows as reached: a TCP
// connection made, or an HTTP answer that is not the proxy's refusal.
func reached(out string) []string {
	var hits []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "OPEN":
			hits = append(hits, f[1]+" (tcp)")
		case len(f) == 3 && f[0] == "VIA-PROXY" && f[2] != "000" && f[2] != "403" && f[2] != "502":
			hits = append(hits, f[1]+" (http "+f[2]+")")
		}
	}
	return hits
}

func newWallsTargets(t *testing.T) wallsTargets {
	t.Helper()
	ui := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "web ui") }))
	t.Cleanup(ui.Close)
	ext := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "internet-shaped") }))
	t.Cleanup(ext.Close)
	return wallsTargets{frontend: server.FrontendAddress(), ui: strings.TrimPrefix(ui.URL, "http://"), external: ext}
}

// wallsSandbox opens a sandbox of mode m with the deployment's control plane
// on its deny list and api.example.test pinned to the external stand-in.
func wallsSandbox(t *testing.T, m sandbox.Mode, tg wallsTargets) *sandbox.Sandbox {
	t.Helper()
	var deny []egress.Dest
	for _, a := range []string{tg.frontend, tg.ui, tg.ingress} {
		ap := netip.MustParseAddrPort(a)
		deny = append(deny, egress.Dest{Prefix: netip.PrefixFrom(ap.Addr(), 32), Port: ap.Port()})
	}
	sb := sandbox.Open(sandbox.Config{Mode: m, Egress: egress.Policy{Deny: deny,
		Hosts: map[string]string{"api.example.test": strings.TrimPrefix(tg.external.URL, "http://")}}})
	t.Cleanup(func() { _ = sb.Close() })
	if st := sb.Status(); st.Mode != m {
		if sandboxtest.Required() {
			t.Fatalf("mechanism %s unavailable on this machine: %s", m, st.Error)
		}
		t.Skipf("mechanism %s unavailable here: %s", m, st.Error)
	}
	return sb
}

// toolResult returns the stored result of call id in session.
func (e *env) toolResult(session, id string) *transcript.Message {
	e.t.Helper()
	entries, err := e.kit.Store.Entries(context.Background(), session)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, en := range entries {
		if en.Message != nil && en.Message.Role == transcript.RoleToolResult && en.Message.ToolCallID == id {
			return en.Message
		}
	}
	return nil
}

func TestToolsCannotReachTheControlPlane(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []sandbox.Mode{sandbox.Namespaces, sandbox.Landlock, sandbox.Off} {
		for _, network := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/network=%v", m, network), func(t *testing.T) {
				e := newEnv(t)
				hs := e.ingress()
				tg := newWallsTargets(t)
				tg.ingress = strings.TrimPrefix(hs.URL, "http://")
				e.kit.Loader.Sandbox = wallsSandbox(t, m, tg)
				targets := []string{tg.frontend, tg.ui, tg.ingress, "169.254.169.254:80"}
				script := probeScript(targets...)
				e.write("tools/probe.yaml", "description: probe\ncommand: |\n"+indent(script)+"\n")
				cfg := fmt.Sprintf("mcpServers:\n  prober:\n    command: %s\n    env: {FASTAGENT_E2E_MCP: \"1\"}\n", exe)
				if network {
					cfg += "tools:\n  network: on\n"
				}
				e.writeConfig(cfg)
				e.startWorker()
				ext := strings.TrimPrefix(tg.external.URL, "http://")
				_, extPort, _ := net.SplitHostPort(ext)
				bashCmd := script + "echo \"EXTERNAL $(curl -s -m 5 http://api.example.test:" + extPort + "/)\"\n"
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{
						{ID: "b1", Name: "bash", Args: jsonArgs(t, map[string]string{"command": bashCmd})},
						{ID: "p1", Name: "probe", Args: `{}`},
						{ID: "m1", Name: "probe_network", Args: jsonArgs(t, map[string]any{"addrs": targets})},
					}},
					modelserver.Reply{Text: []string{"probed"}},
				)
				session := "walls-" + string(m) + fmt.Sprint(network)
				must(t, collect(t, e.agent, context.Background(), session, "probe"), agent.TypeCompleted)
				for _, id := range []string{"b1", "p1", "m1"} {
					r := e.toolResult(session, id)
					if r == nil {
						t.Fatalf("%s: no result", id)
					}
					hits := reached(r.Text)
					if m == sandbox.Off {
						// The control: unconfined, the same tools reach the
						// control plane — the probes would catch a hole.
						if len(hits) == 0 {
							t.Errorf("control %s: unconfined, nothing was reached, so the probe proves nothing:\n%s", id, r.Text)
						}
						continue
					}
					if len(hits) > 0 {
						t.Errorf("%s under %s reached %v:\n%s", id, m, hits, r.Text)
					}
				}
				if m == sandbox.Off {
					return
				}
				// The internet-shaped case: by name, through the proxy, only
				// with the network on.
				out := e.toolResult(session, "b1").Text
				if got := strings.Contains(out, "EXTERNAL internet-shaped"); got != network {
					t.Errorf("external host reached = %v with network %v:\n%s", got, network, out)
				}
			})
		}
	}
}

// An agent cannot approve its own gated call: in the same step as the gated
// call, bash posts the approval to the ingress (as an injected prompt would
// ask). The call stays pending until the operator decides.
func TestAgentCannotApproveItself(t *testing.T) {
	for _, m := range []sandbox.Mode{sandbox.Namespaces, sandbox.Landlock, sandbox.Off} {
		for _, network := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/network=%v", m, network), func(t *testing.T) {
				e := newEnv(t)
				hs := e.ingress()
				tg := newWallsTargets(t)
				tg.ingress = strings.TrimPrefix(hs.URL, "http://")
				e.kit.Loader.Sandbox = wallsSandbox(t, m, tg)
				cfg := "tools:\n  counter: {requiresApproval: true}\n"
				if network {
					cfg += "  network: on\n"
				}
				e.writeConfig(cfg)
				e.startWorker()
				session := "selfapprove-" + string(m) + fmt.Sprint(network)
				approve := fmt.Sprintf("sleep 1; for i in 1 2 3 4 5; do curl -s -m 5 -X POST -H 'Content-Type: application/json' "+
					"-d '{\"approve\":true}' %s/sessions/%s/approvals/c1; echo \" rc=$?\"; sleep 0.5; done", hs.URL, session)
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{
						{ID: "c1", Name: "counter", Args: `{}`},
						{ID: "b1", Name: "bash", Args: jsonArgs(t, map[string]string{"command": approve})},
					}},
					modelserver.Reply{Text: []string{"done"}},
				)
				done := make(chan []agent.Event, 1)
				go func() { done <- collect(t, e.agent, context.Background(), session, "deploy") }()
				waitApproval(t, hs.URL, session, "c1")
				// Let bash finish its attempts (five, each bounded by curl's 5 s).
				waitFor(t, time.Minute, "bash's result", func() bool { return e.toolResult(session, "b1") != nil })
				if m == sandbox.Off {
					// Control: unconfined, bash approves the call itself.
					must(t, <-done, agent.TypeCompleted)
					if n := e.kit.Counter.Runs(session); n != 1 {
						t.Errorf("control: unconfined, bash did not approve the call (counter ran %d times); the test proves nothing", n)
					}
					return
				}
				if n := e.kit.Counter.Runs(session); n != 0 {
					t.Fatalf("the gated call ran %d times after the agent's own bash approved it", n)
				}
				post(t, hs.URL+"/sessions/"+session+"/approvals/c1", `{"approve":false,"reason":"not by the agent"}`, http.StatusOK)
				must(t, <-done, agent.TypeCompleted)
				if n := e.kit.Counter.Runs(session); n != 0 {
					t.Errorf("denied call ran %d times", n)
				}
			})
		}
	}
}

// From bash in a real worker: plant files outside the workspace, create a
// missing rule file, read the state dir and secrets, read the environ of
// PID 1 and of the worker. Each fails under both mechanisms.
func TestToolsCannotLeaveTheWorkspace(t *testing.T) {
	for _, m := range []sandbox.Mode{sandbox.Namespaces, sandbox.Landlock} {
		t.Run(string(m), func(t *testing.T) {
			e := newEnv(t)
			tg := newWallsTargets(t)
			tg.ingress = tg.ui
			state := t.TempDir()
			canary := fmt.Sprintf("canary-%d", time.Now().UnixNano())
			if err := os.WriteFile(filepath.Join(state, "api-token"), []byte(canary), 0o600); err != nil {
				t.Fatal(err)
			}
			var deny []egress.Dest
			sb := sandbox.Open(sandbox.Config{Mode: m, Hidden: []string{state}, Egress: egress.Policy{Deny: deny}})
			t.Cleanup(func() { _ = sb.Close() })
			if sb.Status().Mode != m {
				if sandboxtest.Required() {
					t.Fatalf("%s unavailable: %s", m, sb.Status().Error)
				}
				t.Skip(sb.Status().Error)
			}
			e.kit.Loader.Sandbox = sb
			e.startWorker()
			parent := filepath.Dir(e.kit.Dir)
			cmd := strings.Join([]string{
				"echo injected > ../AGENTS.md",
				"mkdir -p \"$HOME/.local/bin-walls\" && echo x > \"$HOME/.local/bin-walls/unshare\"",
				"echo 'sandbox: off' > persona.md",
				"cat " + filepath.Join(state, "api-token"),
				"tr '\\0' '\\n' </proc/1/environ",
				fmt.Sprintf("tr '\\0' '\\n' </proc/%d/environ", os.Getpid()),
				"echo end",
			}, "; ")
			e.kit.Model.Enqueue(
				modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "b1", Name: "bash", Args: jsonArgs(t, map[string]string{"command": cmd})}}},
				modelserver.Reply{Text: []string{"tried"}},
			)
			session := "leave-" + string(m)
			must(t, collect(t, e.agent, context.Background(), session, "try"), agent.TypeCompleted)
			r := e.toolResult(session, "b1")
			if r == nil || !strings.Contains(r.Text, "end") {
				t.Fatalf("bash did not run: %+v", r)
			}
			home, _ := os.UserHomeDir()
			t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(home, ".local/bin-walls")) })
			for path, what := range map[string]string{
				filepath.Join(parent, "AGENTS.md"):              "../AGENTS.md",
				filepath.Join(home, ".local/bin-walls/unshare"): "~/.local/bin/unshare",
			} {
				if _, err := os.Stat(path); err == nil {
					t.Errorf("bash wrote %s under %s", what, m)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(e.kit.Dir, "persona.md")); strings.Contains(string(b), "sandbox") {
				t.Errorf("bash created persona.md under %s", m)
			}
			if strings.Contains(r.Text, canary) || strings.Contains(r.Text, "OPENAI_API_KEY=") {
				t.Errorf("bash read a secret under %s:\n%s", m, r.Text)
			}
		})
	}
}

// With no mechanism, the model gets a tool error that says what to do and
// nothing runs.
func TestToolsFailClosed(t *testing.T) {
	e := newEnv(t)
	sb := sandbox.Open(sandbox.Config{Mode: sandbox.Landlock, Executable: "/nonexistent/fastagent"})
	t.Cleanup(func() { _ = sb.Close() })
	e.kit.Loader.Sandbox = sb
	e.startWorker()
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "b1", Name: "bash", Args: `{"command":"touch ran"}`}}},
		modelserver.Reply{Text: []string{"ok"}},
	)
	must(t, collect(t, e.agent, context.Background(), "closed", "run it"), agent.TypeCompleted)
	r := e.toolResult("closed", "b1")
	if r == nil || !r.IsError || !strings.Contains(r.Text, "tools.sandbox: off") {
		t.Fatalf("result %+v, want an error naming the fix", r)
	}
	if _, err := os.Stat(filepath.Join(e.kit.Dir, "ran")); err == nil {
		t.Error("the tool ran without a sandbox")
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

func jsonArgs(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
