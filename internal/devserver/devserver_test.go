package devserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/internal/uigate"
)

// srv is one dev server (a SQLite file, the Web UI on) shared by the tests
// here; starting one takes a second or two.
var (
	srv     *Server
	keyFile string
)

// helperEnv makes the test binary a parent that starts a dev server,
// prints its PID and waits to be killed (TestChildDiesWithItsParent).
const helperEnv = "FASTAGENT_DEVSERVER_TEST_PARENT"

// canary is a secret in this process's environment that the child must
// not inherit.
const canary = "OPENAI_API_KEY=sk-devserver-canary"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		helperParent()
		return
	}
	k, v, _ := strings.Cut(canary, "=")
	_ = os.Setenv(k, v)
	dir, err := os.MkdirTemp("", "devserver-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	keyFile = filepath.Join(dir, "temporal-token")
	srv, err = Start(context.Background(), Options{
		DatabaseFile:  filepath.Join(dir, "temporal.db"),
		LogWriter:     io.Discard,
		CodecEndpoint: "http://127.0.0.1:1/codec/dev/0123456789abcdef",
		KeyFile:       keyFile,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the dev server:", err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func helperParent() {
	s, err := Start(context.Background(), Options{UIPort: -1, LogWriter: io.Discard, NoSearchAttributes: true})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(s.Pid())
	select {}
}

// The child serves every call that carries the key, refuses the others,
// wrote the key 0600 to the key file, and has the session search
// attributes registered by this side.
func TestServesTheKeyOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	for name, key := range map[string]string{"no key": "", "wrong key": strings.Repeat("0", 64), "the key": srv.APIKey()} {
		c, err := tclient.Dial(ctx, tclient.Config{Address: srv.FrontendAddress(), Namespace: srv.Namespace(), APIKey: key, Plaintext: key != "", Logger: quiet})
		if err != nil {
			t.Fatalf("%s: dial: %v", name, err)
		}
		_, err = c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: srv.Namespace()})
		var denied *serviceerror.PermissionDenied
		if (name == "the key") != (err == nil) || (err != nil && !errors.As(err, &denied)) {
			t.Errorf("%s: list: %v", name, err)
		}
		if name == "the key" {
			if missing, err := sessionstart.Missing(ctx, c, srv.Namespace()); err != nil || len(missing) > 0 {
				t.Errorf("search attributes missing: %v %v", missing, err)
			}
		}
		c.Close()
	}
	b, err := os.ReadFile(keyFile)
	if fi, _ := os.Stat(keyFile); err != nil || strings.TrimSpace(string(b)) != srv.APIKey() || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %q %v", b, err)
	}
}

// A login link made on this side (as `fastagent ui-link` makes one)
// opens the child's Web UI once.
func TestWebUILoginOpensOnce(t *testing.T) {
	link, err := srv.UILoginURL()
	if err != nil || link == "" {
		t.Fatalf("login link: %q %v", link, err)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i, want := range []int{http.StatusSeeOther, http.StatusUnauthorized} {
		resp, err := noFollow.Get(link)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("use %d of the link: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	resp, err := http.Get("http://" + srv.UIAddress() + uigate.SettingsPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("settings without the login: %d", resp.StatusCode)
	}
}

// The key is on no command line (/proc/<pid>/cmdline is readable by every
// process) and in no environment; the child does not inherit the agent's
// secrets either.
func TestKeyNotOnCommandLineNorEnvironment(t *testing.T) {
	pid := strconv.Itoa(srv.Pid())
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile("/proc/" + pid + "/" + f)
		if err != nil {
			t.Skipf("no /proc here: %v", err)
		}
		if strings.Contains(string(b), srv.APIKey()) {
			t.Errorf("the key is in /proc/<child>/%s", f)
		}
		if strings.Contains(string(b), canary) {
			t.Errorf("the parent's OPENAI_API_KEY is in /proc/<child>/%s", f)
		}
	}
}

// The server counts billable actions; the child answers the count.
func TestActionsAnswered(t *testing.T) {
	if a := srv.Actions(""); a == nil {
		t.Fatal("no answer to the actions request")
	}
}

// A parent killed outright (SIGKILL: no Stop, no deferred cleanup) takes
// its dev server with it.
func TestChildDiesWithItsParent(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(exe, "-test.run=^$")
	parent.Env = append(os.Environ(), helperEnv+"=1")
	parent.Stderr = os.Stderr
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		_ = parent.Process.Kill()
		t.Fatalf("the parent printed %q", line)
	}
	if !alive(child) {
		t.Fatal("the child is not running")
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	if !wait.Until(20*time.Second, func() bool { return !alive(child) }) {
		_ = syscall.Kill(child, syscall.SIGKILL)
		t.Fatal("the dev server outlived its parent by 20 s")
	}
}

// alive: pid runs and is not a zombie (a reaped or dead child).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// Stop stops the child: it exits on its own (stdin closed) and Exited
// closes.
func TestStopEndsTheChild(t *testing.T) {
	s, err := Start(context.Background(), Options{UIPort: -1, LogWriter: io.Discard, NoSearchAttributes: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	s.Stop()
	select {
	case <-s.Exited():
	default:
		t.Fatal("Exited is open after Stop")
	}
	if alive(pid) {
		t.Fatal("the child still runs after Stop")
	}
	if err := s.Err(); err != nil {
		t.Errorf("the child exited with %v, want a clean exit", err)
	}
	s.Stop() // idempotent
}

// A port in use is an error naming the flag that changes it, from the
// child's error line.
func TestStartErrorFromTheChild(t *testing.T) {
	_, port, _ := strings.Cut(srv.FrontendAddress(), ":")
	p, _ := strconv.Atoi(port)
	_, err := Start(context.Background(), Options{FrontendPort: p, UIPort: -1, LogWriter: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "--temporal-port") {
		t.Fatalf("err = %v", err)
	}
}
