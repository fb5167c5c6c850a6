package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
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
// chat-link` asks for) signs alice in and leaves the page without the link
// in its address; a prompt streams the model's answer; a tool call that
// needs approval shows Approve/Deny inline and runs once approved; the
// turn completes with the rest of the answer, and the session is listed.
// A second turn's call is denied and never runs. With
// FASTAGENT_WEBCHAT_SCREENSHOT=<file.png> it saves the page as the second
// call waits for its approval (docs/web-chat.png).
func TestWebChatInBrowser(t *testing.T) {
	browser := chromiumPath(t)
	e := newEnv(t)
	e.writeConfig("tools:\n  counter: {requiresApproval: true}\n")
	e.startWorker()
	hs := e.authIngress(func(s *ingress.Server) { s.Chat = ingress.NewChatGate() })
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"Let me count ", "that for you."}, ToolCalls: []modelserver.ToolCall{{ID: "w1", Name: "counter", Args: `{"note":"from the web chat"}`}}},
		modelserver.Reply{Text: []string{"Counted once. ", "All done."}},
		modelserver.Reply{Text: []string{"Once more, then."}, ToolCalls: []modelserver.ToolCall{{ID: "w2", Name: "counter", Args: `{"note":"again"}`}}},
		modelserver.Reply{Text: []string{"Fine, ", "not counting."}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "w3", Name: "bash", Args: fmt.Sprintf(`{"command":%q}`, stepsCommand)}}},
		modelserver.Reply{Text: []string{"Ran the steps."}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "w4", Name: "bash", Args: `{"command":"echo waiting; sleep 60"}`}}},
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

	if err := chromedp.Do(bctx,
		chromedp.Navigate(link.URL),
		chromedp.WaitVisible(chromedp.ID("prompt")),
	); err != nil {
		t.Fatalf("open the link: %v", err)
	}
	if where, err := chromedp.Run(bctx, chromedp.Location()); err != nil || where != hs.URL+"/chat/" {
		t.Fatalf("after the link the page is at %q (%v), want %s/chat/ (the link out of the address)", where, err, hs.URL)
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
	if answer != "Let me count that for you." {
		t.Errorf("streamed answer %q", answer)
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
