package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// authIngress serves the env's durable agent with tokens for alice, bob and
// an admin, and session owners in the env's store, as the serving commands
// assemble it.
func (e *env) authIngress(mod func(*ingress.Server)) *httptest.Server {
	toks := &ingress.Tokens{}
	toks.AddToken("alice", "alice-token", ingress.RightInvoke, ingress.RightControl, ingress.RightApprove)
	toks.AddToken("bob", "bob-token", ingress.RightInvoke, ingress.RightControl, ingress.RightApprove)
	toks.AddToken(ingress.AdminPrincipal, "admin-token", ingress.RightAdmin)
	srv := e.server(e.agent)
	srv.Tokens, srv.Owners = toks, serve.NewOwners(e.kit.Store, e.agent)
	if mod != nil {
		mod(srv)
	}
	srv.SetReady(true)
	hs := httptest.NewServer(srv.Handler())
	e.t.Cleanup(hs.Close)
	return hs
}

// send does one request; hdr "Host" sets the Host header.
func send(t *testing.T, method, url, token, body string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// sessionExists asks Temporal whether a session workflow was ever started.
func (e *env) sessionExists(session string) bool {
	_, err := e.agent.State(context.Background(), session)
	return agent.CodeOf(err) != agent.CodeNoSuchSession
}

// Another principal's session is not found on every route — invoke, fork,
// state, abort, steer, approve, attach — and re-sending its owner's key
// neither attaches to the owner's turn nor starts one; the owner and an
// admin reach it.
func TestAnotherPrincipalsSessionOnWorkflows(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	hs := e.authIngress(nil)
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"alice's", " answer"}})
	st, body, hdr := send(t, http.MethodPost, hs.URL+"/invoke", "alice-token", `{"session":"alice-s","text":"hi"}`, map[string]string{"Idempotency-Key": "k1"})
	if st != 200 || !strings.Contains(body, "alice's") || hdr.Get("Idempotency-Key") != "k1" {
		t.Fatalf("alice's turn: %d %s", st, body)
	}
	calls := e.kit.Model.Count()
	bob := []struct{ name, method, path, body string }{
		{"invoke", http.MethodPost, "/invoke", `{"session":"alice-s","text":"hi"}`},
		{"fork", http.MethodPost, "/invoke", `{"session":"bob-fork","text":"hi","parentSession":"alice-s"}`},
		{"state", http.MethodGet, "/sessions/alice-s", ""},
		{"abort", http.MethodPost, "/sessions/alice-s/abort", `{}`},
		{"steer", http.MethodPost, "/sessions/alice-s/steer", `{"text":"psst"}`},
		{"approve", http.MethodPost, "/sessions/alice-s/approvals/c1", `{"approve":true}`},
		{"attach", http.MethodGet, "/sessions/alice-s/turns/k1/events", ""},
	}
	for _, c := range bob {
		st, body, _ := send(t, c.method, hs.URL+c.path, "bob-token", c.body, map[string]string{"Idempotency-Key": "k1"})
		var v struct{ Code string }
		_ = json.Unmarshal([]byte(body), &v)
		if st != 404 || v.Code != agent.CodeNoSuchSession {
			t.Errorf("bob %s on alice's session: %d %s, want 404 no_such_session", c.name, st, body)
		}
	}
	if e.sessionExists("bob-fork") {
		t.Error("bob's refused fork started a session")
	}
	// alice's key in bob's own session is bob's own new turn.
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"bob's", " answer"}})
	st, body, hdr = send(t, http.MethodPost, hs.URL+"/invoke", "bob-token", `{"session":"bob-s","text":"hi"}`, map[string]string{"Idempotency-Key": "k1"})
	if st != 200 || !strings.Contains(body, "bob's") || strings.Contains(body, "alice's") || hdr.Get("Idempotency-Key") != "k1" {
		t.Errorf("bob's own turn with key k1: %d %s", st, body)
	}
	if n := e.kit.Model.Count() - calls; n != 1 {
		t.Errorf("bob's requests made %d model calls, want 1 (his own turn)", n)
	}
	v, err := e.agent.State(context.Background(), "alice-s")
	if err != nil || v.Turns != 1 {
		t.Errorf("alice's session after bob: %+v, %v; want 1 turn", v, err)
	}
	for _, tok := range []string{"alice-token", "admin-token"} {
		if st, body, _ := send(t, http.MethodGet, hs.URL+"/sessions/alice-s", tok, "", nil); st != 200 {
			t.Errorf("%s reading alice's session: %d %s", tok, st, body)
		}
		if st, body, _ := send(t, http.MethodGet, hs.URL+"/sessions/alice-s/turns/k1/events", tok, "", nil); st != 200 || !strings.Contains(body, "alice's") {
			t.Errorf("%s attaching to alice's turn: %d %s", tok, st, body)
		}
	}
}

// A browser-shaped cross-origin POST (Origin set, text/plain body) and a
// request for a rebound Host start nothing.
func TestBrowserShapedRequestsStartNothing(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	hs := e.authIngress(nil)
	cases := []struct {
		name, session string
		hdr           map[string]string
		status        int
	}{
		{"cross-origin text/plain", "browser-1", map[string]string{"Origin": "https://evil.example", "Content-Type": "text/plain;charset=UTF-8"}, 403},
		{"cross-origin form", "browser-2", map[string]string{"Origin": "https://evil.example", "Content-Type": "application/x-www-form-urlencoded"}, 403},
		{"rebound host", "browser-3", map[string]string{"Host": "evil.example:8787"}, 421},
	}
	for _, c := range cases {
		st, body, _ := send(t, http.MethodPost, hs.URL+"/invoke", "admin-token", fmt.Sprintf(`{"session":%q,"text":"rm -rf"}`, c.session), c.hdr)
		if st != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, st, body, c.status)
		}
		if e.sessionExists(c.session) {
			t.Errorf("%s: a session was started", c.name)
		}
	}
	if n := e.kit.Model.Count(); n != 0 {
		t.Errorf("the model was called %d times", n)
	}
}

// Without tokens, a loopback `fastagent start` generates one, writes it to
// the state dir, and `fastagent invoke` picks it up; a request without it
// is 401. On a non-loopback address the process refuses to start.
func TestGeneratedTokenWorksWithInvoke(t *testing.T) {
	e := newProcessEnv(t)
	e.noProcessToken = true
	port, err := devserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := e.startProcess(t, "start", "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	wait.Until(90*time.Second, func() bool { // reading the token below says what is wrong
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	tokFile := filepath.Join(e.kit.Dir, ".fastagent", serve.TokenFileName)
	b, err := os.ReadFile(tokFile)
	if err != nil {
		p.mu.Lock()
		out := p.out.String()
		p.mu.Unlock()
		t.Fatalf("no generated token file: %v\n%s", err, out)
	}
	if fi, _ := os.Stat(tokFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode())
	}
	// The banner is printed once the runtime serves: just after /health
	// answers.
	if !wait.Until(10*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return strings.Contains(p.out.String(), strings.TrimSpace(string(b)))
	}) {
		t.Error("the generated token was not printed")
	}
	if st, body, _ := send(t, http.MethodPost, base+"/invoke", "", `{"session":"gen","text":"hi"}`, nil); st != 401 {
		t.Errorf("invoke without a token: %d %s, want 401", st, body)
	}
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"token", " accepted"}})
	cmd := exec.Command(fastagentBinary(t), "invoke", "--dir", e.kit.Dir, "--url", base, "--session", "gen", "hi")
	cmd.Env = e.kit.ProcessEnv()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "token accepted") {
		t.Errorf("fastagent invoke with the generated token: %v\n%s", err, out)
	}

	// Non-loopback without tokens: refused, naming the variable.
	port2, err := devserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ref := exec.Command(fastagentBinary(t), "ingress", "--dir", e.kit.Dir, "--host", "0.0.0.0", "--port", strconv.Itoa(port2),
		"--temporal-address", server.FrontendAddress(), "--namespace", server.Namespace())
	ref.Env = append(e.kit.ProcessEnv(), "TEMPORAL_API_KEY="+server.APIKey(), "TEMPORAL_TLS=false", "FASTAGENT_FEED="+natsURL())
	done := make(chan struct{})
	var refOut []byte
	var refErr error
	go func() { refOut, refErr = ref.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = ref.Process.Kill()
		<-done
		t.Fatalf("ingress on 0.0.0.0 without tokens kept running:\n%s", refOut)
	}
	if refErr == nil || !strings.Contains(string(refOut), "FASTAGENT_API_TOKEN") {
		t.Errorf("ingress on 0.0.0.0 without tokens: %v\n%s", refErr, refOut)
	}
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port2)); err == nil {
		resp.Body.Close()
		t.Error("something answers on the refused port")
	}
}
