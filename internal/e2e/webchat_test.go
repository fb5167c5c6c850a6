package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// chromiumPath is the headless browser the web chat test drives. Absent,
// the test skips on a developer's machine and fails in CI (CI set).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium on PATH: install it (`apt-get install -y chromium`, or `make chromium` as root) — the web chat test needs it in CI")
	}
	t.Skip("no Chromium on PATH (apt-get install -y chromium); skipping the browser test outside CI")
	return ""
}

// The web chat in a real browser: a one-time link (what `fastagent
// chat-link` asks for) shows a sign-in page naming alice and sets no
// cookie; its button signs her in, leaves the page without the link in its
// address, and the header names her; a prompt streams the model's answer; a tool call that
// needs approval shows Approve/Deny inline and runs once approved; the
// turn completes with the rest of the answer, and the session is listed.
// A second turn's call is denied and never runs; a third shows bash's
// progress lines live; Stop ends a fourth; a fifth asks a question,
// answered in place; reloaded, the page shows the stored session. With
// FASTAGENT_WEBCHAT_SCREENSHOT=<file.png> it saves the page as the second
// call waits for its approval (docs/web-chat.png).
func TestWebChatInBrowser(t *testing.T) {
	browser := chromiumPath(t)
	e := newEnv(t)
	e.writeConfig("askUser: true\ntools:\n  counter: {requiresApproval: true}\n")
	e.startWorker()
	hs := e.authIngress(func(s *ingress.Server) { s.Chat = ingress.NewChatGate() })
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"Let me count ", "<img src=x onerror=window.pwned=1>that for you."}, ToolCalls: []modelserver.ToolCall{{ID: "w1", Name: "counter", Args: `{"note":"from the web chat"}`}}},
		modelserver.Reply{Text: []string{"Counted once. ", "All done."}},
		modelserver.Reply{Text: []string{"Once more, then."}, ToolCalls: []modelserver.ToolCall{{ID: "w2", Name: "counter", Args: `{"note":"again"}`}}},
		modelserver.Reply{Text: []string{"Fine, ", "not counting."}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "w3", Name: "bash", Args: fmt.Sprintf(`{"command":%q}`, stepsCommand)}}},
		modelserver.Reply{Text: []string{"Ran the steps."}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "w4", Name: "bash", Args: `{"command":"echo waiting; sleep 60"}`}}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "w5", Name: "ask_user", Args: `{"question":"Which colour?"}`}}},
		modelserver.Reply{Text: []string{"Blue it is."}},
	)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	link, err := ingress.RequestChatLink(ctx, http.DefaultClient, hs.URL, "alice-token", ingress.ChatLinkRequest{})
	if err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.WindowSize(1100, 720),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	// The link shows who it signs in, and signs in only when asked to.
	if err := chromedp.Do(bctx,
		chromedp.Navigate(link.URL),
		chromedp.WaitVisible(chromedp.ID("signin")),
	); err != nil {
		t.Fatalf("open the link: %v", err)
	}
	if title := text(t, bctx, "#signin-title"); !strings.HasPrefix(title, "Sign in to ") || !strings.HasSuffix(title, " as alice") {
		t.Errorf("sign-in page says %q, want Sign in to <agent> as alice", title)
	}
	if ck, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.cookie`)); err != nil || ck != "" {
		t.Errorf("the sign-in page set cookies %q (%v) before its button was pressed", ck, err)
	}
	if err := chromedp.Do(bctx,
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("prompt")),
	); err != nil {
		t.Fatalf("press Sign in: %v", err)
	}
	if where, err := chromedp.Run(bctx, chromedp.Location()); err != nil || where != hs.URL+"/chat/" {
		t.Fatalf("after the link the page is at %q (%v), want %s/chat/ (the link out of the address)", where, err, hs.URL)
	}
	if who, err := chromedp.Run(bctx, chromedp.Poll[string](`document.getElementById('who').textContent`)); err != nil || who != "signed in as alice" {
		t.Errorf("the header names %q (%v), want signed in as alice", who, err)
	}

	if err := chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.ID("prompt"), "count once, please"),
		chromedp.Click(chromedp.ID("send")),
		chromedp.WaitVisible(chromedp.CSS(".box.approval button.approve")),
		chromedp.WaitVisible(chromedp.ID("stop")),
	); err != nil {
		t.Fatalf("send a prompt and wait for the approval: %v", err)
	}
	answer := text(t, bctx, ".turn .msg.assistant")
	if answer != "Let me count <img src=x onerror=window.pwned=1>that for you." {
		t.Errorf("streamed answer %q", answer)
	}
	// The model's markup is text: no element made of it, no script run.
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#logs img').length + (window.pwned ? 100 : 0)`)); err != nil || n != 0 {
		t.Errorf("the model's markup became elements or ran (%d, %v)", n, err)
	}
	if box := text(t, bctx, ".box.approval"); !strings.Contains(box, "counter") || !strings.Contains(box, "from the web chat") {
		t.Errorf("approval box %q, want the tool and its arguments", box)
	}
	session := pageSession(t, bctx)
	if n := e.kit.Counter.Runs(session); n != 0 {
		t.Fatalf("the counter ran %d times before its approval", n)
	}
	if err := chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(".box.approval button.approve")),
		chromedp.WaitVisible(chromedp.CSS(".turn .status.done")),
		chromedp.WaitNotVisible(chromedp.ID("stop")),
		chromedp.WaitVisible(chromedp.CSS("#sessions li button")),
	); err != nil {
		t.Fatalf("approve and wait for the turn to complete: %v", err)
	}
	texts, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.turn .msg.assistant'), e => e.textContent)`))
	if err != nil || len(texts) != 2 || texts[1] != "Counted once. All done." {
		t.Errorf("answer texts %q (%v), want the first step's and %q", texts, err, "Counted once. All done.")
	}
	if st := text(t, bctx, ".box.approval .status"); !strings.HasPrefix(st, "Approved by alice") {
		t.Errorf("approval status %q, want approved by alice", st)
	}
	if n := e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("the approved counter ran %d times, want 1", n)
	}
	if listed := text(t, bctx, "#sessions li button"); !strings.HasPrefix(listed, session) {
		t.Errorf("sessions list shows %q, want %s", listed, session)
	}
	if tool := text(t, bctx, ".turn details.tool summary"); tool != "✓ counter" {
		t.Errorf("the tool call's summary %q, want ✓ counter", tool)
	}

	// A second turn in the same session: its call is denied, and never runs.
	if err := chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.ID("prompt"), "and once more"),
		chromedp.Click(chromedp.ID("send")),
		chromedp.WaitVisible(chromedp.CSS(".turn:nth-of-type(4) .box.approval button.deny")),
	); err != nil {
		t.Fatalf("second prompt: %v", err)
	}
	if out := os.Getenv("FASTAGENT_WEBCHAT_SCREENSHOT"); out != "" {
		png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s: %d bytes", out, len(png))
	}

	if err := chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(".turn:nth-of-type(4) .box.approval button.deny")),
		chromedp.WaitVisible(chromedp.CSS(".turn:nth-of-type(4) .status.done")),
	); err != nil {
		t.Fatalf("deny and wait for the turn to complete: %v", err)
	}
	if st := text(t, bctx, ".turn:nth-of-type(4) .box.approval .status"); !strings.HasPrefix(st, "Denied by alice") {
		t.Errorf("second approval status %q, want denied by alice", st)
	}
	second, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.turn:nth-of-type(4) .msg.assistant'), e => e.textContent)`))
	if err != nil || len(second) != 2 || second[1] != "Fine, not counting." {
		t.Errorf("second turn's texts %q (%v), want it to end %q", second, err, "Fine, not counting.")
	}
	if n := e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("after the denial the counter ran %d times, want 1", n)
	}

	// A third turn runs bash (no approval): its progress lines show under
	// the call while it runs (recorded as the page shows them), then its
	// result replaces them.
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.seen = []; new MutationObserver(() => {
			for (const p of document.querySelectorAll('.progress')) if (p.textContent && !window.seen.includes(p.textContent)) window.seen.push(p.textContent);
		}).observe(document.getElementById('logs'), {subtree: true, childList: true, characterData: true}); true`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.ID("prompt"), "run the steps"),
		chromedp.Click(chromedp.ID("send")),
		chromedp.WaitVisible(chromedp.CSS(".turn:nth-of-type(6) .status.done")),
	); err != nil {
		t.Fatalf("third prompt: %v", err)
	}
	seen, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`window.seen`))
	if err != nil || len(seen) == 0 || !strings.HasPrefix(seen[0], "step ") {
		t.Errorf("progress lines shown %q (%v), want the command's step lines", seen, err)
	}
	if got := text(t, bctx, ".turn:nth-of-type(6) details.tool summary"); got != "✓ bash" {
		t.Errorf("bash call summary %q", got)
	}
	if res, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('.turn:nth-of-type(6) details.tool .result').textContent`)); err != nil || !strings.Contains(res, "step 3") {
		t.Errorf("bash result %q (%v), want its output", res, err)
	}
	t.Logf("progress lines the page showed: %q", seen)

	// Stop ends a running turn.
	if err := chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.ID("prompt"), "wait a minute"),
		chromedp.Click(chromedp.ID("send")),
		chromedp.WaitVisible(chromedp.CSS(".turn:nth-of-type(8) details.tool")),
		chromedp.Click(chromedp.ID("stop")),
		chromedp.WaitVisible(chromedp.CSS(".turn:nth-of-type(8) .status.done")),
		chromedp.WaitNotVisible(chromedp.ID("stop")),
	); err != nil {
		t.Fatalf("stop a running turn: %v", err)
	}
	if st := text(t, bctx, ".turn:nth-of-type(8) .status.done"); st != "stopped" {
		t.Errorf("stopped turn's status %q, want stopped", st)
	}

	// A question the agent asks is answered in place.
	if err := chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.ID("prompt"), "ask me something"),
		chromedp.Click(chromedp.ID("send")),
		chromedp.WaitVisible(chromedp.CSS(".turn:nth-of-type(10) .box.question input")),
		chromedp.SendKeys(chromedp.CSS(".turn:nth-of-type(10) .box.question input"), "blue"),
		chromedp.Click(chromedp.CSS(".turn:nth-of-type(10) .box.question button")),
		chromedp.WaitVisible(chromedp.CSS(".turn:nth-of-type(10) .status.done")),
	); err != nil {
		t.Fatalf("answer a question: %v", err)
	}
	if q := text(t, bctx, ".turn:nth-of-type(10) .box.question"); !strings.Contains(q, "Which colour?") || !strings.Contains(q, "Answered: blue") {
		t.Errorf("question box %q", q)
	}
	if a, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.turn:nth-of-type(10) .msg.assistant'), e => e.textContent)`)); err != nil || !slices.Contains(a, "Blue it is.") {
		t.Errorf("answer after the question %q (%v)", a, err)
	}

	// Reloaded (the cookie stays), the page lists the session and shows its
	// stored transcript: the prompts, the answers, the tool calls folded.
	if err := chromedp.Do(bctx,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS("#sessions li button")),
		chromedp.Click(chromedp.CSS("#sessions li button")),
		chromedp.WaitVisible(chromedp.CSS(`.log[data-session="`+session+`"] details.tool`)),
	); err != nil {
		t.Fatalf("reload and open the session: %v", err)
	}
	shown, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#logs .msg.user, #logs .msg.assistant, #logs details.tool summary'), e => e.textContent)`))
	if err != nil || !slices.Contains(shown, "count once, please") || !slices.Contains(shown, "Counted once. All done.") ||
		!slices.Contains(shown, "✓ counter") || !slices.Contains(shown, "✓ bash") || !slices.Contains(shown, "wait a minute") {
		t.Errorf("the stored session shows %q (%v)", shown, err)
	}
}

// text is the text of the first element matching the CSS selector sel.
func text(t *testing.T, bctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// pageSession is the session the page is on.
func pageSession(t *testing.T, bctx context.Context) string {
	t.Helper()
	id, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#logs .log').dataset.session`))
	if err != nil || id == "" {
		t.Fatalf("the page's session: %q %v", id, err)
	}
	return id
}

// `fastagent dev` prints a web chat link for its token's principal, and
// `fastagent chat-link` asks the running server for more: each signs in
// once, through its sign-in page (a second open is refused and sets no
// cookie), and a link made by a
// `dev` that has since restarted does not open on the new one.
func TestWebChatLinksFromDev(t *testing.T) {
	kit := testkit.New(t)
	srv, err := devserver.Find(nil)
	if err != nil {
		t.Fatal(err)
	}
	port, err := devserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	env := append(kit.ProcessEnv(), devserver.EnvBinary+"="+srv, "FASTAGENT_API_TOKEN="+e2eToken)
	// Each run has a state dir of its own: the restarted one shares
	// nothing with the first but the port and the token.
	startDev := func() *lab.Proc {
		tport, err := devserver.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p, err := lab.StartProc(fastagentBinary(t), []string{"dev", "--dir", kit.Dir, "--state-dir", t.TempDir(), "--port", strconv.Itoa(port),
			"--temporal-port", strconv.Itoa(tport), "--no-ui", "--log-level", "warn"}, env)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Stop(15 * time.Second)
			if t.Failed() {
				t.Logf("fastagent dev output:\n%s", p.Output())
			}
		})
		if err := p.WaitOutput("fastagent dev ready", 3*time.Minute); err != nil {
			t.Fatalf("fastagent dev: %v\n%s", err, p.Output())
		}
		return p
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	dev := startDev()
	// The banner's lines follow "ready"; its last one is the Try: line.
	if err := dev.WaitOutput("Try: fastagent invoke", time.Minute); err != nil {
		t.Fatalf("fastagent dev printed no banner: %v\n%s", err, dev.Output())
	}
	printed := ""
	for _, line := range strings.Split(dev.Output(), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "Chat "); ok {
			printed = strings.TrimSpace(rest)
		}
	}
	if !strings.HasPrefix(printed, base+"/chat/login?t=") {
		t.Fatalf("dev printed no chat link:\n%s", dev.Output())
	}
	cli := func() string {
		t.Helper()
		out, err := exec.Command(fastagentBinary(t), "chat-link", "--url", base, "--ttl", "2m").Output() //nolint:gosec // the test's own binary
		if err != nil {
			t.Fatalf("fastagent chat-link: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	cmd := exec.Command(fastagentBinary(t), "chat-link", "--url", base)
	cmd.Env = append(os.Environ(), "FASTAGENT_API_TOKEN=wrong")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "not valid") {
		t.Errorf("chat-link with a wrong token: %v %s", err, out)
	}
	t.Setenv("FASTAGENT_API_TOKEN", e2eToken)
	made := cli()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// open opens a link as the browser does: its sign-in page (which sets
	// no cookie), then the page's button, posted from the server's origin.
	open := func(link string) (int, int) {
		t.Helper()
		resp, err := noFollow.Get(link)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(resp.Cookies()) != 0 {
			t.Errorf("the sign-in page set cookies %v", resp.Cookies())
		}
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, 0
		}
		if !strings.Contains(string(page), " as "+ingress.AdminPrincipal+"</h1>") {
			t.Errorf("the sign-in page does not name %s:\n%s", ingress.AdminPrincipal, page)
		}
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, base+"/chat/login", strings.NewReader(url.Values{"t": {u.Query().Get("t")}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base)
		resp, err = noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, len(resp.Cookies())
	}
	for name, link := range map[string]string{"printed by dev": printed, "made by chat-link": made} {
		if st, n := open(link); st != http.StatusSeeOther || n != 2 {
			t.Errorf("%s: first open %d with %d cookies, want 303 and 2", name, st, n)
		}
		if st, n := open(link); st != http.StatusForbidden || n != 0 {
			t.Errorf("%s: second open %d with %d cookies, want 403 and none", name, st, n)
		}
	}

	// A restart: links made before it do not open.
	unused := cli()
	dev.Stop(15 * time.Second)
	startDev()
	if st, n := open(unused); st != http.StatusForbidden || n != 0 {
		t.Errorf("a link from before the restart: %d with %d cookies, want 403 and none", st, n)
	}
	if st, _ := open(cli()); st != http.StatusSeeOther {
		t.Errorf("a link from after the restart: %d", st)
	}
}
