package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/workflows"
)

// The tctl commands the documentation shows, run as shown (the key in
// TEMPORAL_CLI_AUTH, the address in TEMPORAL_CLI_ADDRESS), each with the
// page that shows it: TestTctlDrivesDev fails when a page stops showing it.
var (
	tctlTrigger  = []string{"schedule", "trigger", "--schedule_id", "schedule:daily"}
	tctlPause    = []string{"schedule", "toggle", "--schedule_id", "schedule:daily", "--pause"}
	tctlStart    = []string{"workflow", "start", "--taskqueue", "fastagent", "--workflow_type", "Session", "--workflow_id", "session:billing", "--input", `{"session":"billing"}`, "--search_attr_key", "FastAgentAgent|FastAgentChannel|FastAgentStatus", "--search_attr_value", `"fastagent"|"api"|"idle"`}
	tctlDeliver  = []string{"workflow", "signal", "--workflow_id", "session:billing", "--name", "deliver", "--input", `{"key":"billing:inv-42","source":"billing","prompt":{"text":"Invoice 42 failed; tell me why"}}`}
	tctlList     = []string{"workflow", "list", "--query", `FastAgentChannel = "schedule" AND FastAgentStatus = "idle"`, "--print_search_attr"}
	tctlDescribe = []string{"workflow", "describe", "--workflow_id", "session:billing"}
	tctlOpen     = []string{"workflow", "list", "--open"}
	tctlShow     = []string{"workflow", "show", "--workflow_id", "session:billing"}
	tctlDocs     = []struct {
		page  string
		shown []string
	}{
		{"docs/agent-definition.md", tctlTrigger},
		{"docs/agent-definition.md", tctlPause},
		{"docs/webhooks.md", tctlStart},
		{"docs/webhooks.md", tctlDeliver},
		{"docs/operations.md", tctlList},
		{"docs/operations.md", tctlDescribe},
		{"docs/security.md", tctlOpen},
		// the session the README's first turn makes; run on session:billing
		{"docs/security.md", []string{"workflow", "show", "--workflow_id", "session:s1"}},
	}
)

// tctl 1.x drives a `fastagent dev` process the way the documentation
// shows, the run's key passed in TEMPORAL_CLI_AUTH: it triggers a schedule
// (its turn runs and answers), starts a session and sends it the public
// deliver signal (the message becomes a turn with the model's answer),
// lists sessions by their search attributes (the schedule's session is
// there, the other is not) and describes a session (running, with its
// search attributes). Without the key tctl is refused and nothing fires.
func TestTctlDrivesDev(t *testing.T) {
	t.Parallel()
	for _, d := range tctlDocs {
		requireDocShows(t, d.page, "tctl "+shellLine(d.shown))
	}
	tctl := tctlBinary(t)
	kit := testkit.New(t)
	writeFile(t, filepath.Join(kit.Dir, schedules.Dir, "daily.yaml"), schedYAML("0 3 1 1 *", "UTC", "Write the daily digest"))
	kit.Model.EnqueueFor("Write the daily digest", modelserver.Reply{Text: []string{"digest:", " all quiet"}})
	kit.Model.EnqueueFor("Invoice 42 failed", modelserver.Reply{Text: []string{"card", " expired"}})

	temporal := startDevProcess(t, kit)
	// As "$(cat .fastagent/temporal-token)" reads it.
	raw, err := os.ReadFile(filepath.Join(kit.Dir, ".fastagent", "temporal-token"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimRight(string(raw), "\n")
	c, err := tclient.Dial(context.Background(), tclient.Config{
		Address: temporal, APIKey: key, Plaintext: true, Namespace: "default",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	home := t.TempDir() // tctl keeps its config under $HOME
	run := func(auth string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, tctl, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TEMPORAL_CLI_ADDRESS=" + temporal}
		if auth != "" {
			cmd.Env = append(cmd.Env, "TEMPORAL_CLI_AUTH="+auth)
		}
		out, err := cmd.CombinedOutput()
		t.Logf("tctl %s\n%s", strings.ReplaceAll(shellLine(args), key, "<key>"), out)
		return string(out), err
	}
	bearer := "Bearer " + key
	must := func(args ...string) string {
		t.Helper()
		out, err := run(bearer, args...)
		if err != nil {
			t.Fatalf("tctl %s: %v\n%s", shellLine(args), err, out)
		}
		return out
	}

	// The worker reconciles schedules/ in the background after dev is ready:
	// wait until the schedule exists, so the refusals below are refusals.
	waitFor(t, time.Minute, "the schedule schedule:daily to exist", func() bool {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		_, err := c.ScheduleClient().GetHandle(dctx, "schedule:daily").Describe(dctx)
		return err == nil
	})
	// Without the key (or with another) the frontend refuses tctl, and the
	// schedule does not fire.
	for _, auth := range []string{"", "Bearer not-the-key"} {
		if out, err := run(auth, tctlTrigger...); err == nil || !strings.Contains(out, "PermissionDenied") {
			t.Errorf("tctl schedule trigger with auth %q: %v, want PermissionDenied:\n%s", auth, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if fires, err := schedules.History(ctx, c, "daily", 10); err != nil || len(fires) != 0 {
		t.Fatalf("after refused triggers the schedule has fires %+v (%v), want none", fires, err)
	}

	// 1. Trigger the schedule: its turn runs in session schedule:daily and
	// answers.
	must(tctlTrigger...)
	var fire schedules.Fire
	waitFor(t, 2*time.Minute, "the triggered fire's record", func() bool {
		fires, err := schedules.History(ctx, c, "daily", 10)
		if err != nil || len(fires) == 0 || fires[0].Record == nil {
			return false
		}
		fire = fires[0]
		return true
	})
	if r := fire.Record; r.Outcome != workflows.FireCompleted || r.Reply != "digest: all quiet" || r.Session != "schedule:daily" {
		t.Errorf("the triggered fire: %+v, want completed in schedule:daily with the model's answer", r)
	}

	// Pause and unpause it: fastagent keeps that state.
	for _, pause := range []bool{true, false} {
		args := tctlPause
		if !pause {
			args = append(args[:len(args)-1:len(args)-1], "--unpause")
		}
		must(args...)
		d, err := c.ScheduleClient().GetHandle(ctx, workflows.ScheduleID("daily")).Describe(ctx)
		if err != nil || d.Schedule.State.Paused != pause {
			t.Errorf("after tctl %s the schedule is paused: %v (%v)", shellLine(args), d != nil && d.Schedule.State.Paused, err)
		}
	}

	// 2. Start a session and deliver a message to it: it becomes a turn
	// with the model's answer. tctl 1.x has no signal-with-start; its start
	// of a session that runs already answers that run and starts nothing,
	// so "start, then signal" may be run whether or not the session runs.
	runID := regexp.MustCompile(`run Id: (\S+)`)
	first := runID.FindStringSubmatch(must(tctlStart...))
	again := runID.FindStringSubmatch(must(tctlStart...))
	if first == nil || again == nil || first[1] != again[1] {
		t.Errorf("two starts of session:billing gave runs %q and %q, want the same run", first, again)
	}
	must(tctlDeliver...)
	if got := recordedAnswer(t, &env{t: t, kit: kit}, "billing", "billing:inv-42"); got != "card expired" {
		t.Errorf("the delivered turn's answer = %q, want the model's %q", got, "card expired")
	}
	var asked bool
	for _, r := range kit.Model.Requests() {
		asked = asked || strings.Contains(r.LastUserText(), "Invoice 42 failed; tell me why")
	}
	if !asked {
		t.Error("the model was never asked the delivered message")
	}

	// 3. List sessions by search attribute: the schedule's session, idle
	// again, is listed; the billing session (channel api) is not.
	var listed string
	waitFor(t, time.Minute, "the schedule's idle session in the listing", func() bool {
		listed = must(tctlList...)
		return strings.Contains(listed, "session:schedule:daily") && strings.Contains(listed, "FastAgentStatus=idle")
	})
	if strings.Contains(listed, "session:billing") || !strings.Contains(listed, "FastAgentChannel=schedule") {
		t.Errorf("the listing by FastAgentChannel = \"schedule\":\n%s", listed)
	}

	// 4. Describe the delivered session: running, with its search
	// attributes, its status idle once the turn ended.
	var desc tctlDescription
	waitFor(t, time.Minute, "the billing session described idle", func() bool {
		out := must(tctlDescribe...)
		desc = tctlDescription{}
		if err := json.Unmarshal([]byte(out), &desc); err != nil {
			t.Fatalf("tctl workflow describe printed no JSON (%v):\n%s", err, out)
		}
		return desc.Info.SearchAttributes.Fields[workflows.AttrStatus] == workflows.StatusIdle
	})
	info := desc.Info
	if info.Execution.WorkflowID != "session:billing" || info.Type.Name != "Session" || info.Status != "Running" {
		t.Errorf("described %+v, want the Session workflow session:billing running", info)
	}
	for attr, want := range map[string]string{workflows.AttrAgent: "fastagent", workflows.AttrChannel: "api"} {
		if got := info.SearchAttributes.Fields[attr]; got != want {
			t.Errorf("described %s = %v, want %q", attr, got, want)
		}
	}

	// The session's history and the open sessions.
	if out := must(tctlShow...); !strings.Contains(out, "WorkflowExecutionSignaled") || !strings.Contains(out, "billing:inv-42") {
		t.Errorf("tctl workflow show: no deliver signal in the history:\n%s", out)
	}
	if out := must(tctlOpen...); !strings.Contains(out, "session:billing") || !strings.Contains(out, "session:schedule:daily") {
		t.Errorf("tctl workflow list --open misses a session:\n%s", out)
	}

	// --auth takes the key too (on the command line: not on a shared
	// machine, where every local process reads the command lines).
	if out, err := run("", append([]string{"--auth", bearer}, tctlDescribe...)...); err != nil || !strings.Contains(out, `"Running"`) {
		t.Errorf("tctl --auth workflow describe: %v\n%s", err, out)
	}
}

// tctlDescription is what `tctl workflow describe` prints (JSON, search
// attributes decoded).
type tctlDescription struct {
	Info struct {
		Execution struct {
			WorkflowID string `json:"workflowId"`
		} `json:"execution"`
		Type struct {
			Name string `json:"name"`
		} `json:"type"`
		Status           string `json:"status"`
		SearchAttributes struct {
			Fields map[string]any `json:"indexedFields"`
		} `json:"searchAttributes"`
	} `json:"workflowExecutionInfo"`
}

// startDevProcess runs `fastagent dev` in the kit's folder, as a user
// does, on free ports and without the Web UI, waits until it is ready and
// returns the host:port of its Temporal frontend.
func startDevProcess(t *testing.T, kit *testkit.Kit) string {
	t.Helper()
	srv, err := devserver.Find(nil)
	if err != nil {
		t.Fatal(err)
	}
	port, err := devserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	tport, err := devserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	env := append(kit.ProcessEnv(), devserver.EnvBinary+"="+srv, "FASTAGENT_API_TOKEN="+e2eToken)
	p, err := lab.StartProc(fastagentBinary(t), []string{"dev", "--dir", kit.Dir, "--port", strconv.Itoa(port),
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
	return fmt.Sprintf("127.0.0.1:%d", tport)
}

var (
	tctlOnce sync.Once
	tctlPath string
	tctlErr  error
)

// tctlBinary returns tctl: $FASTAGENT_TCTL (the Makefile's build), else
// the one tctl.sh builds once per machine into the Go path.
func tctlBinary(t *testing.T) string {
	t.Helper()
	tctlOnce.Do(func() {
		if p := os.Getenv("FASTAGENT_TCTL"); p != "" {
			tctlPath = p
			return
		}
		cmd := exec.Command("bash", "tctl.sh")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			tctlErr = fmt.Errorf("tctl.sh: %w\n%s", err, stderr.String())
			return
		}
		tctlPath = strings.TrimSpace(string(out))
		if stderr.Len() > 0 {
			t.Logf("tctl.sh:\n%s", stderr.String())
		}
	})
	if tctlErr != nil {
		t.Fatal(tctlErr)
	}
	if fi, err := os.Stat(tctlPath); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("tctl %s: not an executable (%v); unset FASTAGENT_TCTL or run make bin/tctl", tctlPath, err)
	}
	return tctlPath
}

// shellLine is args as one would type them in a POSIX shell, each quoted
// with single quotes when it has to be.
func shellLine(args []string) string {
	plain := regexp.MustCompile(`^[A-Za-z0-9_./:=@%+-]+$`)
	out := make([]string, len(args))
	for i, a := range args {
		if plain.MatchString(a) {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// requireDocShows fails unless the page (from the repository root) shows
// the command line, allowing it to be split with backslash-newlines.
func requireDocShows(t *testing.T, page, line string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", page))
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`\\\n[ \t]*`).ReplaceAllString(string(b), " ")
	text = regexp.MustCompile(`[ \t]+`).ReplaceAllString(text, " ")
	if !strings.Contains(text, line) {
		t.Errorf("%s does not show the command the test runs:\n  %s", page, line)
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
