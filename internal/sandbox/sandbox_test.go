package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/egress"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// canary is a secret planted in the test process's environment, as a
// provider key is in a worker's.
const canaryEnv = "FASTAGENT_SANDBOX_TEST_SECRET"

var canary string

func TestMain(m *testing.M) {
	// Plant the canary in this process's initial environment (what
	// /proc/<pid>/environ shows), as a worker's keys are: re-execute with it.
	if os.Getenv(canaryEnv) == "" {
		env := append(os.Environ(), canaryEnv+"=canary-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		if exe, err := os.Executable(); err == nil {
			err = syscall.Exec(exe, os.Args, env)
			fmt.Fprintln(os.Stderr, "re-exec with a canary secret:", err)
		}
		os.Exit(2)
	}
	canary = os.Getenv(canaryEnv)
	os.Exit(m.Run())
}

// required reports whether a mechanism missing here fails the test rather
// than skipping it (CI, and make test with FASTAGENT_REQUIRE_SERVICES).
func required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("FASTAGENT_REQUIRE_SERVICES") == "1"
}

var (
	boxesMu sync.Mutex
	boxes   = map[string]*sandbox.Sandbox{}
)

// env is the world one sandbox serves: a state dir outside the workspace,
// a secret file, a loopback server standing in for the control plane.
type env struct {
	state, secretFile string
	control           *httptest.Server
	external          *httptest.Server
}

var (
	worldOnce sync.Once
	world     env
)

func theWorld(t *testing.T) env {
	worldOnce.Do(func() {
		base, err := os.MkdirTemp("", "sandbox-world-")
		if err != nil {
			panic(err)
		}
		world.state = filepath.Join(base, "state")
		_ = os.MkdirAll(world.state, 0o700)
		_ = os.WriteFile(filepath.Join(world.state, "sessions.db"), []byte("SQLite "+canary), 0o600)
		_ = os.WriteFile(filepath.Join(world.state, "api-token"), []byte(canary), 0o600)
		world.secretFile = filepath.Join(base, "codec.key")
		_ = os.WriteFile(world.secretFile, []byte(canary), 0o600)
		world.control = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "control-plane-reached")
		}))
		world.external = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "internet-reached")
		}))
	})
	return world
}

// box returns the shared sandbox of mode m, or skips/fails when this
// machine cannot provide it.
func box(t *testing.T, m sandbox.Mode) *sandbox.Sandbox {
	t.Helper()
	return boxWithABI(t, m, 0)
}

// boxWithABI is box with the helper using Landlock ABI abi (0: the
// kernel's), standing in for an older kernel.
func boxWithABI(t *testing.T, m sandbox.Mode, abi int) *sandbox.Sandbox {
	t.Helper()
	w := theWorld(t)
	boxesMu.Lock()
	defer boxesMu.Unlock()
	key := string(m)
	if abi > 0 {
		key += "-abi" + strconv.Itoa(abi)
	}
	if b, ok := boxes[key]; ok {
		return b
	}
	ctrl := netip.MustParseAddrPort(strings.TrimPrefix(w.control.URL, "http://"))
	ext := strings.TrimPrefix(w.external.URL, "http://")
	b := sandbox.Open(sandbox.WithLandlockABI(sandbox.Config{Mode: m, Hidden: []string{w.state, w.secretFile},
		Egress: egress.Policy{
			Deny:  []egress.Dest{{Prefix: netip.PrefixFrom(ctrl.Addr(), 32), Port: ctrl.Port()}},
			Hosts: map[string]string{"api.example.test": ext},
		}}, abi))
	st := b.Status()
	if st.Mode != m {
		if required() {
			t.Fatalf("sandbox mode %s unavailable on this machine: %s", m, st.Error)
		}
		t.Skipf("sandbox mode %s unavailable here: %s", m, st.Error)
	}
	boxes[key] = b
	return b
}

type result struct {
	out  string
	err  error
	code int
}

// run runs a bash script in ws under b.
func run(t *testing.T, b *sandbox.Sandbox, ws string, script string, opts ...func(*sandbox.Cmd)) result {
	t.Helper()
	var out bytes.Buffer
	c := &sandbox.Cmd{Path: "/bin/bash", Args: []string{"bash", "-c", script}, Dir: ws,
		Env:    []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + os.Getenv("HOME"), "LANG=C"},
		Stdout: &out, Stderr: &out, Writable: []string{ws},
		Protected: []sandbox.Rule{{Path: filepath.Join(ws, "fastagent.yaml")}, {Path: filepath.Join(ws, "tools"), Dir: true},
			{Path: filepath.Join(ws, "persona.md")}, {Path: filepath.Join(ws, "AGENTS.md")}, {Path: filepath.Join(ws, ".git"), Dir: true}},
		Hidden:    []string{filepath.Join(ws, ".env"), filepath.Join(ws, ".fastagent")},
		WaitDelay: time.Second}
	for _, o := range opts {
		o(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.Start(ctx, c)
	if err != nil {
		return result{err: err, code: -2}
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		p.Kill()
		err = <-done
	}
	code := 0
	if ee, ok := err.(*sandbox.ExitError); ok {
		code = ee.ExitCode()
		err = nil
	}
	return result{out: out.String(), err: err, code: code}
}

func withNetwork(c *sandbox.Cmd) { c.Network = true }

// workspace makes a workspace with rules, a .env and a state dir holding
// the canary.
func workspace(t *testing.T) string {
	t.Helper()
	parent := t.TempDir()
	ws := filepath.Join(parent, "ws")
	must(t, os.MkdirAll(filepath.Join(ws, "tools"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "fastagent.yaml"), []byte("model: x\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, ".env"), []byte("OPENAI_API_KEY="+canary), 0o600))
	must(t, os.MkdirAll(filepath.Join(ws, ".fastagent"), 0o700))
	must(t, os.WriteFile(filepath.Join(ws, ".fastagent", "api-token"), []byte(canary), 0o600))
	must(t, os.MkdirAll(filepath.Join(ws, "src"), 0o755))
	return ws
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var modes = []sandbox.Mode{sandbox.Namespaces, sandbox.Landlock}

// Each attack is run confined (it must fail) and, where it says so,
// unconfined as a control (it must succeed there, so the test can fail).
func TestAttacks(t *testing.T) {
	w := theWorld(t)
	home := os.Getenv("HOME")
	ctrl := strings.TrimPrefix(w.control.URL, "http://")
	host, port, _ := net.SplitHostPort(ctrl)
	cases := []struct {
		name   string
		script string
		// bad is found in the output (or the check passes) when the attack worked.
		bad   func(ws string, r result) bool
		leaks bool // the unconfined control shows the attack working
		net   bool
	}{
		{name: "write ../AGENTS.md", script: `echo injected > ../AGENTS.md`, leaks: true,
			bad: func(ws string, _ result) bool { return exists(filepath.Join(filepath.Dir(ws), "AGENTS.md")) }},
		{name: "plant ~/.local/bin/unshare", script: `mkdir -p "$HOME/.local/bin-fa-test" && echo evil > "$HOME/.local/bin-fa-test/unshare"`, leaks: true,
			bad: func(string, result) bool { return exists(filepath.Join(home, ".local/bin-fa-test/unshare")) }},
		{name: "create missing persona.md", script: `echo injected > persona.md`, leaks: true,
			bad: func(ws string, _ result) bool { return contains(filepath.Join(ws, "persona.md"), "injected") }},
		{name: "create missing AGENTS.md", script: `echo injected > AGENTS.md`, leaks: true,
			bad: func(ws string, _ result) bool { return contains(filepath.Join(ws, "AGENTS.md"), "injected") }},
		{name: "append to fastagent.yaml", script: `echo 'sandbox: off' >> fastagent.yaml`, leaks: true,
			bad: func(ws string, _ result) bool { return contains(filepath.Join(ws, "fastagent.yaml"), "sandbox") }},
		{name: "truncate fastagent.yaml", script: `truncate -s 0 fastagent.yaml; : > fastagent.yaml`, leaks: true,
			bad: func(ws string, _ result) bool { return !contains(filepath.Join(ws, "fastagent.yaml"), "model") }},
		{name: "add a tool", script: `echo 'command: x' > tools/x.yaml`, leaks: true,
			bad: func(ws string, _ result) bool { return exists(filepath.Join(ws, "tools/x.yaml")) }},
		{name: "replace tools/", script: `mv tools tools.old; mkdir tools; echo 'command: x' > tools/x.yaml`, leaks: true,
			bad: func(ws string, _ result) bool { return exists(filepath.Join(ws, "tools/x.yaml")) }},
		{name: "plant .git", script: `mkdir -p .git/hooks && echo x > .git/config`, leaks: true,
			bad: func(ws string, _ result) bool { return exists(filepath.Join(ws, ".git/config")) }},
		{name: "read .env", script: `cat .env`, leaks: true, bad: outHasCanary},
		{name: "read workspace state", script: `cat .fastagent/api-token`, leaks: true, bad: outHasCanary},
		{name: "read state dir outside workspace", script: `cat ` + w.state + `/sessions.db ` + w.state + `/api-token`, leaks: true, bad: outHasCanary},
		{name: "read a secret file", script: `cat ` + w.secretFile, leaks: true, bad: outHasCanary},
		{name: "worker environ", script: `cat /proc/$PPID/environ; cat /proc/` + strconv.Itoa(os.Getpid()) + `/environ`, leaks: true, bad: outHasCanary},
		{name: "every environ", script: `for f in /proc/*/environ; do tr '\0' '\n' <"$f"; done 2>/dev/null`, leaks: true, bad: outHasCanary},
		{name: "pid 1 environ", script: `tr '\0' '\n' </proc/1/environ`, bad: outHasCanary},
		{name: "environment", script: `env`, bad: outHasCanary},
		{name: "loopback control plane, network off", script: `exec 3<>/dev/tcp/` + host + `/` + port + ` && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && cat <&3`, leaks: true,
			bad: func(_ string, r result) bool { return strings.Contains(r.out, "control-plane-reached") }},
		{name: "loopback control plane via curl, network off", script: `curl -sS --max-time 5 ` + w.control.URL, leaks: true,
			bad: func(_ string, r result) bool { return strings.Contains(r.out, "control-plane-reached") }},
		{name: "loopback control plane, network on", net: true, script: `curl -sS --noproxy '*' --max-time 5 ` + w.control.URL + `; curl -sS --max-time 5 ` + w.control.URL + `; exec 3<>/dev/tcp/` + host + `/` + port + ` && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && cat <&3`, leaks: true,
			bad: func(_ string, r result) bool { return strings.Contains(r.out, "control-plane-reached") }},
		{name: "cloud metadata, network on", net: true, script: `curl -sS --max-time 5 http://169.254.169.254/latest/meta-data/; echo code=$?`,
			bad: func(_ string, r result) bool { return !strings.Contains(r.out, "169.254.169.254") }},
		{name: "unix socket", script: `python3 -c "import socket; s=socket.socket(socket.AF_UNIX); print('unix-socket-made')"`,
			bad: func(_ string, r result) bool { return strings.Contains(r.out, "unix-socket-made") }},
		{name: "udp", net: true, script: `python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('127.0.0.1', 53)); print('udp-sent')"`,
			bad: func(_ string, r result) bool { return strings.Contains(r.out, "udp-sent") }},
	}
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			b := box(t, m)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					_ = os.RemoveAll(filepath.Join(home, ".local/bin-fa-test"))
					ws := workspace(t)
					var opts []func(*sandbox.Cmd)
					if c.net {
						opts = append(opts, withNetwork)
					}
					r := run(t, b, ws, c.script, opts...)
					if r.err != nil {
						t.Fatalf("start: %v", r.err)
					}
					if c.bad(ws, r) {
						t.Errorf("attack worked under %s:\n%s", m, r.out)
					}
					if c.leaks {
						_ = os.RemoveAll(filepath.Join(home, ".local/bin-fa-test"))
						ws := workspace(t)
						r := run(t, box(t, sandbox.Off), ws, c.script, opts...)
						if !c.bad(ws, r) {
							t.Errorf("control: the attack fails even unconfined, so this case proves nothing:\n%s", r.out)
						}
					}
				})
			}
		})
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(home, ".local/bin-fa-test")) })
}

func outHasCanary(_ string, r result) bool { return strings.Contains(r.out, canary) }

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func contains(p, s string) bool {
	b, err := os.ReadFile(p)
	return err == nil && strings.Contains(string(b), s)
}

// What a tool is meant to do still works: write in the workspace (new
// files in existing directories), its own temporary directory, reach an
// internet host by name through the proxy when it has the network.
func TestAllowed(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			b := box(t, m)
			ws := workspace(t)
			r := run(t, b, ws, `set -e
echo hello > src/new.txt; cat src/new.txt
echo more >> src/new.txt; rm src/new.txt
mkdir -p src/deep/er && echo x > src/deep/er/f && rm -r src/deep
echo tmp > "$TMPDIR/t" && cat "$TMPDIR/t"
cat fastagent.yaml
ls -a | tr '\n' ' '
echo >/dev/null && echo devnull-ok`)
			if r.err != nil || r.code != 0 {
				t.Fatalf("code %d err %v:\n%s", r.code, r.err, r.out)
			}
			for _, want := range []string{"hello", "tmp", "model: x", "devnull-ok", "fastagent.yaml"} {
				if !strings.Contains(r.out, want) {
					t.Errorf("output lacks %q:\n%s", want, r.out)
				}
			}
			r = run(t, b, ws, `curl -sS --max-time 10 http://api.example.test:`+portOf(theWorld(t).external.URL)+`/`, withNetwork)
			if !strings.Contains(r.out, "internet-reached") {
				t.Errorf("network on: the external host is not reachable by name through the proxy:\n%s", r.out)
			}
			r = run(t, b, ws, `curl -sS --max-time 5 http://api.example.test:`+portOf(theWorld(t).external.URL)+`/; echo code=$?`)
			if strings.Contains(r.out, "internet-reached") {
				t.Errorf("network off: the external host is reachable:\n%s", r.out)
			}
		})
	}
}

func portOf(u string) string {
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(u, "http://"))
	return p
}

// A call's temporary directory is its own: another call does not see it.
func TestPrivateTmp(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			b := box(t, m)
			ws := workspace(t)
			r1 := run(t, b, ws, `echo secret-of-call-one > "$TMPDIR/mine"; echo "$TMPDIR"`)
			r2 := run(t, b, ws, `cat "`+strings.TrimSpace(r1.out)+`/mine" 2>&1; ls /tmp 2>&1; grep -r secret-of-call-one /tmp 2>/dev/null; echo end`)
			if strings.Contains(r2.out, "secret-of-call-one") {
				t.Errorf("call two reads call one's temporary file:\n%s", r2.out)
			}
		})
	}
}

// A job detached from the call (setsid, nohup, double fork) ends with it.
func TestDetachedJobsEndWithCall(t *testing.T) {
	for _, m := range append(modes, sandbox.Off) {
		t.Run(string(m), func(t *testing.T) {
			b := box(t, m)
			ws := workspace(t)
			marker := fmt.Sprintf("1000.%d%d", os.Getpid(), time.Now().UnixNano()%1000)
			r := run(t, b, ws, `(setsid sleep `+marker+` >/dev/null 2>&1 &); sleep 0.2; echo started`)
			if !strings.Contains(r.out, "started") {
				t.Fatalf("%+v", r)
			}
			if !wait.Until(5*time.Second, func() bool { return !processWithArg(marker) }) {
				t.Errorf("a detached job of the call is still running after the call ended")
			}
		})
	}
}

// A job that is a chain of processes, each in a process group of its own
// and each waiting for the next, deeper than the helper's sweep used to go
// (ten levels, one per pass), ends with the call too.
func TestDeepJobsEndWithCall(t *testing.T) {
	for _, m := range append(modes, sandbox.Off) {
		t.Run(string(m), func(t *testing.T) {
			b := box(t, m)
			ws := workspace(t)
			marker := fmt.Sprintf("1000.%d%d", os.Getpid(), time.Now().UnixNano()%1000)
			t.Cleanup(func() { killWithArg(marker) })
			must(t, os.WriteFile(filepath.Join(ws, "src", "chain.py"), []byte(`import os, sys
for i in range(int(sys.argv[1])):
    os.setpgid(0, 0)
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0); os._exit(0)
os.setpgid(0, 0)
os.execv("/bin/sleep", ["sleep", sys.argv[2]])
`), 0o644))
			r := run(t, b, ws, `python3 src/chain.py 30 `+marker+` >/dev/null 2>&1 &
until pgrep -f "^sleep `+marker+`" >/dev/null; do sleep 0.05; done; echo started`)
			if !strings.Contains(r.out, "started") {
				t.Fatalf("%+v", r)
			}
			if !wait.Until(5*time.Second, func() bool { return !processWithArg(marker) }) {
				t.Errorf("a job of the call 30 processes deep is still running after the call ended")
			}
		})
	}
}

// killWithArg kills this test's processes whose command line holds arg.
func killWithArg(arg string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(b, []byte(arg)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func processWithArg(arg string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(arg)) && !bytes.Contains(b, []byte("bash")) {
			return true
		}
	}
	return false
}

// With no mechanism, nothing runs and the error says what to do.
func TestFailsClosed(t *testing.T) {
	b := sandbox.Open(sandbox.Config{Mode: sandbox.Landlock, Executable: "/nonexistent/fastagent"})
	defer b.Close()
	st := b.Status()
	if st.Mode != "" || st.Error == "" {
		t.Fatalf("status %+v", st)
	}
	ws := workspace(t)
	r := run(t, b, ws, `touch ran`)
	if r.err == nil || exists(filepath.Join(ws, "ran")) {
		t.Fatalf("a tool ran without a sandbox: %+v", r)
	}
	for _, want := range []string{"tool sandbox unavailable", "tools.sandbox: off", "FASTAGENT_SANDBOX=off"} {
		if !strings.Contains(r.err.Error(), want) {
			t.Errorf("error %q does not say %q", r.err, want)
		}
	}
}

// A descriptor the worker inherited without close-on-exec (from a shell, a
// supervisor, a terminal multiplexer: a pipe, a terminal, a socket) reaches
// no tool: a tool has its stdin, stdout and stderr, nothing more, in both
// modes.
func TestToolsInheritNoWorkerDescriptor(t *testing.T) {
	var p [2]int
	must(t, syscall.Pipe(p[:])) // no O_CLOEXEC, as an inherited descriptor
	defer func() { _ = syscall.Close(p[0]); _ = syscall.Close(p[1]) }()
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			b := sandbox.Open(sandbox.Config{Mode: m, Hidden: []string{theWorld(t).state}})
			t.Cleanup(func() { _ = b.Close() })
			if st := b.Status(); st.Mode != m {
				if required() {
					t.Fatalf("%s unavailable: %s", m, st.Error)
				}
				t.Skipf("%s unavailable here: %s", m, st.Error)
			}
			ws := workspace(t)
			r := run(t, b, ws, `for fd in /proc/self/fd/*; do n=${fd##*/}; [ "$n" -gt 2 ] && [ -e "$fd" ] && echo "open: $n $(readlink "$fd")"; done; echo listed`)
			if !strings.Contains(r.out, "listed") {
				t.Fatalf("%+v", r)
			}
			for _, l := range strings.Split(r.out, "\n") {
				if strings.HasPrefix(l, "open: ") && !strings.Contains(l, "/proc/") {
					t.Errorf("a tool holds a descriptor beyond its standard streams: %s", l)
				}
			}
		})
	}
}

// A control-plane address learned after the sandbox opened (the Temporal
// frontend of a client given later) is refused to tools from the next
// call on, even where a name is pinned to it: the call carries the deny
// list to the helper's proxy before the tool starts.
func TestDenyLearnedAfterOpen(t *testing.T) {
	frontend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "frontend-reached")
	}))
	defer frontend.Close()
	fe := netip.MustParseAddrPort(strings.TrimPrefix(frontend.URL, "http://"))
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			b := sandbox.Open(sandbox.Config{Mode: m, Egress: egress.Policy{Hosts: map[string]string{"temporal.example.test": fe.String()}}})
			defer b.Close()
			if st := b.Status(); st.Mode != m {
				if required() {
					t.Fatalf("sandbox mode %s unavailable on this machine: %s", m, st.Error)
				}
				t.Skipf("sandbox mode %s unavailable here: %s", m, st.Error)
			}
			ws := workspace(t)
			curl := `curl -sS --max-time 10 -w " status=%{http_code}" http://temporal.example.test:` + strconv.Itoa(int(fe.Port())) + `/`
			if r := run(t, b, ws, curl, withNetwork); !strings.Contains(r.out, "frontend-reached") {
				t.Fatalf("before Deny the pinned host is not reachable (the test cannot fail):\n%s", r.out)
			}
			b.Deny([]egress.Dest{{Prefix: netip.PrefixFrom(fe.Addr(), 32), Port: fe.Port()}})
			if r := run(t, b, ws, curl, withNetwork); strings.Contains(r.out, "frontend-reached") || !strings.Contains(r.out, "status=403") {
				t.Errorf("after Deny a tool reached the frontend, or was not refused by the proxy:\n%s", r.out)
			}
			if cp := b.ControlPlane(); !slices.Contains(cp, egress.Dest{Prefix: netip.PrefixFrom(fe.Addr(), 32), Port: fe.Port()}) {
				t.Errorf("ControlPlane() = %v, want the denied frontend", cp)
			}
		})
	}
}

// A control-plane address learned while a networked call is already
// running (a stdio MCP server started before the Temporal frontend was
// known) is refused to that call too, from the moment Deny returns — not
// only to the network calls started after it: Deny reaches the helper's
// proxy at once, even when the next call has no network.
func TestDenyReachesRunningCall(t *testing.T) {
	frontend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "frontend-reached")
	}))
	defer frontend.Close()
	fe := netip.MustParseAddrPort(strings.TrimPrefix(frontend.URL, "http://"))
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			b := sandbox.Open(sandbox.Config{Mode: m, Egress: egress.Policy{Hosts: map[string]string{"temporal.example.test": fe.String()}}})
			defer b.Close()
			if st := b.Status(); st.Mode != m {
				if required() {
					t.Fatalf("sandbox mode %s unavailable on this machine: %s", m, st.Error)
				}
				t.Skipf("sandbox mode %s unavailable here: %s", m, st.Error)
			}
			ws := workspace(t)
			// A long-lived networked call: one request per line it reads.
			script := `while read -r _; do curl -sS --max-time 10 -w " status=%{http_code}" http://temporal.example.test:` +
				strconv.Itoa(int(fe.Port())) + `/ 2>&1; echo " END"; done`
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			c := &sandbox.Cmd{Path: "/bin/bash", Args: []string{"bash", "-c", script}, Dir: ws,
				Env:   []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + os.Getenv("HOME"), "LANG=C"},
				Stdin: inR, Stdout: outW, Stderr: outW, Writable: []string{ws}, Network: true, WaitDelay: time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := b.Start(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Kill()
			lines := bufio.NewReader(outR)
			ask := func() string {
				t.Helper()
				if _, err := io.WriteString(inW, "go\n"); err != nil {
					t.Fatal(err)
				}
				var out string
				for !strings.HasSuffix(out, " END\n") {
					s, err := lines.ReadString('\n')
					if err != nil {
						t.Fatal(err)
					}
					out += s
				}
				return out
			}
			if out := ask(); !strings.Contains(out, "frontend-reached") {
				t.Fatalf("before Deny the running call does not reach the frontend (the test cannot fail): %s", out)
			}
			b.Deny([]egress.Dest{{Prefix: netip.PrefixFrom(fe.Addr(), 32), Port: fe.Port()}})
			// A call without network in between changes nothing for the proxy.
			if r := run(t, b, ws, "true"); r.err != nil || r.code != 0 {
				t.Fatalf("a call after Deny: %v (exit %d) %s", r.err, r.code, r.out)
			}
			if out := ask(); strings.Contains(out, "frontend-reached") || !strings.Contains(out, "status=403") {
				t.Errorf("after Deny the running call still reached the frontend, or was not refused by the proxy: %s", out)
			}
			_ = inW.Close()
		})
	}
}
