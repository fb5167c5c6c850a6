package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/lab/chaosreport"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// devKill SIGKILLs the whole `fastagent dev` process (embedded Temporal on
// its SQLite file, worker and ingress) in the middle of a turn, restarts it
// on the same state dir, and checks what survived.
func (ch *chaos) devKill() error {
	ch.prog.Logf("building the full fastagent binary")
	bin, err := ch.bins.Full()
	if err != nil {
		return err
	}
	root, err := lab.ModuleRoot()
	if err != nil {
		return err
	}
	withSched := false
	if st, err := os.Stat(filepath.Join(root, "internal", "schedules")); err == nil && st.IsDir() {
		withSched = true
	}
	var t chaosreport.Tally
	t.Row.Scenario = "fastagent dev SIGKILL mid-turn, restart on the same state dir"
	var restarts lab.Sample
	schedOK := 0
	for i := 0; i < ch.f.devTrials; i++ {
		ch.prog.Logf("trial %d/%d", i+1, ch.f.devTrials)
		r, d, sched := ch.devTrial(bin, i, withSched)
		if d > 0 {
			restarts = append(restarts, d)
		}
		if sched {
			schedOK++
		}
		t.Add(r)
	}
	schedNote := "schedule: not yet applicable (no internal/schedules in the tree)"
	if withSched {
		schedNote = fmt.Sprintf("session store, pending wake-up and schedule (same create time) intact in %d/%d", schedOK, ch.f.devTrials)
	} else {
		schedNote = "session store and pending wake-up checked; " + schedNote
	}
	extra := []string{schedNote}
	if len(restarts) > 0 {
		extra = append(extra, "restart to /health 200: median "+restarts.P50().Round(time.Millisecond).String())
	}
	ch.rows = append(ch.rows, t.Done(extra...))
	return nil
}

// devTrial is one kill-and-restart: session A has one finished turn,
// session W a pending wake-up, session M is killed mid-stream and re-invoked
// with its Idempotency-Key after the restart.
func (ch *chaos) devTrial(bin string, i int, withSched bool) (res chaosreport.Trial, restart time.Duration, schedIntact bool) {
	var notes []string
	defer func() { res.Note = strings.Join(notes, ", ") }()
	kit, err := lab.NewKit()
	if err != nil {
		notes = append(notes, err.Error())
		return res, 0, false
	}
	defer kit.Close()
	if err := kit.WriteConfig("selfSchedule: true\nretry:\n  heartbeat: 3s\n"); err != nil {
		notes = append(notes, err.Error())
		return res, 0, false
	}
	tag := fmt.Sprintf("%s-%d", ch.run, i)
	schedName := "nightly-" + tag
	if withSched {
		if err := writeSchedule(kit.Dir, schedName); err != nil {
			notes = append(notes, err.Error())
			return res, 0, false
		}
	}
	port, _ := lab.FreePort()
	tport, _ := lab.FreePort()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	start := func() (*lab.Proc, time.Duration, error) {
		lab.Token = devToken
		p, err := lab.StartProc(bin, []string{"dev", "--dir", kit.Dir, "--port", strconv.Itoa(port),
			"--temporal-port", strconv.Itoa(tport), "--no-ui", "--log-level", envOr("FASTAGENT_LAB_DEV_LOG", "warn")},
			append(kit.ProcessEnv(), "FASTAGENT_API_TOKEN="+devToken))
		if err != nil {
			return nil, 0, err
		}
		d, err := waitHealthy(p, base+"/health", 2*time.Minute)
		if err != nil {
			p.Kill()
			return nil, 0, err
		}
		return p, d, nil
	}
	p, _, err := start()
	if err != nil {
		notes = append(notes, "start dev: "+err.Error())
		res.Lost++
		return res, 0, false
	}
	defer func() {
		if p != nil {
			p.Stop(10 * time.Second)
		}
	}()

	sA, sW, sM := "devA-"+tag, "devW-"+tag, "devM-"+tag
	ms := kit.Model
	ms.EnqueueFor(sA+" hello", modelserver.Reply{Text: []string{"hi there"}})
	ms.EnqueueFor(sW+" remind", modelserver.Reply{ToolCalls: []modelserver.ToolCall{{
		ID: "call_wake", Name: "wake", Args: `{"in":"1h","prompt":"check the build"}`,
	}}}, modelserver.Reply{Text: []string{"scheduled"}})
	ms.EnqueueFor(sM+" warm", modelserver.Reply{Text: []string{"ready"}})
	slow := make([]string, 30)
	for j := range slow {
		slow[j] = fmt.Sprintf("word%d ", j)
	}
	ms.EnqueueFor(sM+" long", modelserver.Reply{Text: slow, ChunkDelay: 100 * time.Millisecond},
		modelserver.Reply{Text: []string{"the ", "answer"}})

	turn := func(session, prompt, key string, each func(lab.Received)) invokeResult {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		rs, err := lab.InvokeHTTP(ctx, base, session, prompt, key, each)
		r := invokeResult{evs: lab.Events(rs), err: err}
		r.term, r.n, r.ok = lab.Terminal(r.evs)
		return r
	}
	oneTerm := true
	expect := func(r invokeResult, what string) bool {
		if !r.ok || r.term.Type != agent.TypeCompleted {
			oneTerm = oneTerm && r.ok
			notes = append(notes, fmt.Sprintf("%s: %v %s", what, r.err, lab.OneLine(lab.Describe(r.evs), 120)))
			return false
		}
		return true
	}
	spec := expect(turn(sA, sA+" hello", "", nil), "turn in A")
	spec = expect(turn(sW, sW+" remind me", "", nil), "wake turn in W") && spec
	spec = expect(turn(sM, sM+" warm up", "", nil), "warm-up in M") && spec
	if v, err := sessionState(base, sW); err != nil || len(v.Wakes) != 1 {
		notes = append(notes, fmt.Sprintf("before the kill W has %d wake-ups (%v)", len(v.Wakes), err))
		spec = false
	}
	before, _ := kit.Store.Sessions(context.Background())
	var schedCreated time.Time
	if withSched {
		if schedCreated, err = scheduleCreated(kit.Dir, tport, schedName, 15*time.Second); err != nil {
			notes = append(notes, "schedule before the kill: "+err.Error())
			spec = false
		}
	}

	// Kill the whole process at the first text delta of M's long turn.
	key := "key-" + sM
	var once sync.Once
	cut := turn(sM, sM+" long story", key, func(r lab.Received) {
		if r.Type == agent.TypeText {
			once.Do(p.Kill)
		}
	})
	<-p.Done()
	if cut.n != 0 {
		notes = append(notes, fmt.Sprintf("the cut stream carried %d terminals", cut.n))
	}
	p, restart, err = start()
	if err != nil {
		notes = append(notes, "restart dev: "+err.Error())
		res.Lost++
		p = nil
		return res, 0, false
	}

	if restart > 10*time.Second {
		notes = append(notes, fmt.Sprintf("slow restart (%s): %s", restart.Round(time.Second), lab.OneLine(devReadyLine(p.Output()), 200)))
	}
	if os.Getenv("FASTAGENT_LAB_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "--- restarted dev output:\n%s\n---\n", p.Output())
	}

	// Everything stored before the kill is still there.
	after, err := kit.Store.Sessions(context.Background())
	if err != nil || len(after) < len(before) {
		notes = append(notes, fmt.Sprintf("sessions in the store: %d before, %d after (%v)", len(before), len(after), err))
		res.Lost += max(0, len(before)-len(after))
	}
	if v, err := sessionState(base, sA); err != nil || v.Turns != 1 {
		notes = append(notes, fmt.Sprintf("A after restart: turns=%d (%v)", v.Turns, err))
		spec = false
	}
	if v, err := sessionState(base, sW); err != nil || len(v.Wakes) != 1 || v.Wakes[0].Prompt != "check the build" {
		notes = append(notes, fmt.Sprintf("W after restart: wakes=%+v (%v)", v.Wakes, err))
		res.Lost++
	}
	if withSched && !schedCreated.IsZero() {
		got, err := scheduleCreated(kit.Dir, tport, schedName, 15*time.Second)
		switch {
		case err != nil:
			notes = append(notes, "schedule after restart: "+err.Error())
			res.Lost++
		case !got.Equal(schedCreated):
			notes = append(notes, fmt.Sprintf("schedule re-created at restart (created %s, was %s): its history did not survive", got, schedCreated))
		default:
			schedIntact = true
		}
	}
	// The interrupted turn completes: the same key gets its one outcome.
	again := turn(sM, sM+" long story", key, nil)
	oneTerm = oneTerm && again.ok
	// The turn may have finished before the re-invoke (then no text is
	// replayed, only the outcome): the answer is checked in the store.
	if !again.ok || again.term.Type != agent.TypeCompleted {
		notes = append(notes, fmt.Sprintf("re-invoke of M: %v %s", again.err, lab.OneLine(lab.Describe(again.evs), 160)))
		spec = false
	}
	if txt := agent.AnswerText(again.evs); txt != "" && txt != "the answer" {
		notes = append(notes, fmt.Sprintf("re-invoke of M streamed %q", lab.OneLine(txt, 60)))
		spec = false
	}
	if got := lastReply(kit, sM); got != "the answer" {
		notes = append(notes, fmt.Sprintf("M's stored reply is %q, want %q", lab.OneLine(got, 60), "the answer"))
		spec = false
	}
	if again.n == 0 {
		res.Lost++
	} else if again.n > 1 {
		res.Duplicates += again.n - 1
	}
	ctx := context.Background()
	for _, c := range []struct {
		session string
		prompts []string
	}{
		{sA, []string{sA + " hello"}},
		{sW, []string{sW + " remind me"}},
		{sM, []string{sM + " warm up", sM + " long story"}},
	} {
		tr := lab.CheckTranscript(ctx, kit.Store, c.session, c.prompts, true)
		res.Duplicates += tr.Duplicates
		res.Lost += tr.Missing
		if len(tr.Problems) > 0 {
			notes = append(notes, c.session+": "+strings.Join(tr.Problems, "; "))
			spec = false
		}
	}
	res.OneTerminal = oneTerm
	res.AsSpecified = spec && res.Lost == 0 && res.Duplicates == 0
	return res, restart, schedIntact
}

// writeSchedule writes schedules/<name>.yaml (a daily fire that does not
// come during the trial) into the agent dir.
func writeSchedule(dir, name string) error {
	if err := os.MkdirAll(filepath.Join(dir, "schedules"), 0o755); err != nil {
		return err
	}
	body := "cron: \"0 3 * * *\"\ntz: UTC\nprompt: \"nightly check\"\n"
	return os.WriteFile(filepath.Join(dir, "schedules", name+".yaml"), []byte(body), 0o644)
}

// scheduleCreated dials the dev process's Temporal (with the key it wrote
// into the state dir of workspace dir) and returns when the
// Temporal Schedule of schedule file name was created (its ID is
// "schedule:<name>", as internal/schedules names it), waiting up to limit
// for it to appear.
func scheduleCreated(dir string, temporalPort int, name string, limit time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	tc := tclient.Config{Address: fmt.Sprintf("127.0.0.1:%d", temporalPort), Logger: lab.QuietLogger()}
	c, err := tclient.Dial(ctx, tc.WithDevToken(filepath.Join(dir, ".fastagent")))
	if err != nil {
		return time.Time{}, err
	}
	defer c.Close()
	for {
		d, err := c.ScheduleClient().GetHandle(ctx, "schedule:"+name).Describe(ctx)
		if err == nil {
			return d.Info.CreatedAt, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("schedule:%s not found: %w", name, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// devToken is the API token the chaos dev process is started with.
const devToken = "lab-dev-token"

// sessionState reads GET /sessions/{id}.
func sessionState(base, session string) (workflows.SessionView, error) {
	var v workflows.SessionView
	req, err := http.NewRequest(http.MethodGet, base+"/sessions/"+session, nil)
	if err != nil {
		return v, err
	}
	req.Header.Set("Authorization", "Bearer "+devToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET /sessions/%s: %s", session, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// devReadyLine returns the "fastagent dev ready in …" line of a dev
// process's output, or its last line.
func devReadyLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		if strings.Contains(l, "ready in") {
			return strings.TrimSpace(l)
		}
	}
	return lines[len(lines)-1]
}

// lastReply is the text of the session's last assistant entry.
func lastReply(k *lab.Kit, session string) string {
	entries, err := k.Store.Entries(context.Background(), session)
	if err != nil {
		return "error: " + err.Error()
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if m := entries[i].Message; m != nil && m.Role == "assistant" {
			return m.Text
		}
	}
	return ""
}
