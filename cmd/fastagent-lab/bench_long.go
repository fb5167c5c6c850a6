package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/proto"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/actions"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/workflows"
)

// histPoint is a session workflow's current run and its history size.
type histPoint struct {
	run    string
	bytes  int64
	events int64
}

// describeHistory returns the current run of session and its history size
// (DescribeWorkflowExecution's figure, or the sum of the events' encoded
// sizes when the server does not report one).
func (b *bench) describeHistory(ctx context.Context, session string) (histPoint, error) {
	d, err := b.c.DescribeWorkflow(ctx, workflows.WorkflowID(session), "")
	if err != nil {
		return histPoint{}, fmt.Errorf("describe %s: %w", session, err)
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	p := histPoint{run: info.GetExecution().GetRunId(), bytes: info.GetHistorySizeBytes(), events: info.GetHistoryLength()}
	if p.bytes > 0 {
		return p, nil
	}
	it := b.c.GetWorkflowHistory(ctx, workflows.WorkflowID(session), p.run, false, 0)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return histPoint{}, err
		}
		h.Events = append(h.Events, ev)
		p.bytes += int64(proto.Size(ev))
	}
	p.events = int64(len(h.Events))
	return p, nil
}

// 4. History growth: bytes one turn adds to the current run's history, from
// turn 5 and at the end of one long session (same-size turns, averaged
// over historyWindow turns at each end; the session continues as new every
// 200 turns).
func (b *bench) historyGrowth() error {
	H := b.f.history
	if H < 6 {
		return fmt.Errorf("-history %d: need more than 5 turns", H)
	}
	ctx := context.Background()
	session := "hist-" + b.run
	width := len(strconv.Itoa(H))
	added := make([]int64, H+1)  // -1: the turn straddled a continue-as-new
	runOf := make([]int, H+1)    // 1-based run number of the turn
	events := make([]int64, H+1) // events the turn added
	runs := map[string]int{}
	var before histPoint
	for k := 1; k <= H; k++ {
		if _, err := timeTurn(b.dur, session, fmt.Sprintf("history turn %0*d", width, k)); err != nil {
			return err
		}
		after, err := b.describeHistory(ctx, session)
		if err != nil {
			return err
		}
		if _, ok := runs[after.run]; !ok {
			runs[after.run] = len(runs) + 1
		}
		runOf[k] = runs[after.run]
		switch {
		case k == 1:
			added[k] = -1 // includes the workflow's start
		case after.run != before.run:
			added[k] = -1
		default:
			added[k], events[k] = after.bytes-before.bytes, after.events-before.events
		}
		before = after
		b.prog.Printf("%d/%d turns (run %d)", k, H, runOf[k])
	}
	label := sectionLabel("history")
	// One turn's bytes depend on how its events fell into workflow tasks
	// (the next turn's update may arrive before or after the workflow task
	// that answers this one): compare the mean of historyWindow turns from
	// turn 5 with the mean of the last historyWindow whole turns.
	mean := func(from, to int) (float64, float64, int) {
		var b, e float64
		n := 0
		for k := from; k <= to && k <= H; k++ {
			if added[k] >= 0 {
				b, e, n = b+float64(added[k]), e+float64(events[k]), n+1
			}
		}
		if n == 0 {
			return 0, 0, 0
		}
		return b / float64(n), e / float64(n), n
	}
	w := min(historyWindow, (H-4)/2)
	firstTo := 5 + w - 1
	lastTo := H
	for lastTo > firstTo && added[lastTo] < 0 {
		lastTo--
	}
	lastFrom := max(firstTo+1, lastTo-w+1)
	a5, e5, n5 := mean(5, firstTo)
	aL, eL, nL := mean(lastFrom, lastTo)
	if n5 == 0 || nL == 0 {
		return fmt.Errorf("history growth: no whole turns to compare (turns 5–%d, %d–%d)", firstTo, lastFrom, lastTo)
	}
	diff := (aL - a5) / a5 * 100
	// What the turns themselves wrote, workflow-task events left out:
	// their number depends on when the next turn arrived, not on the turn.
	c5, err := b.turnContent(ctx, session, runs, runOf, 5, firstTo)
	if err != nil {
		return err
	}
	cL, err := b.turnContent(ctx, session, runs, runOf, lastFrom, lastTo)
	if err != nil {
		return err
	}
	cdiff := (cL - c5) / c5 * 100
	b.rows = append(b.rows,
		row{Figure: label, Variant: "the turns' own events (workflow tasks left out)",
			Result: fmt.Sprintf("%s → %s per turn (%+.1f %%)", lab.Bytes(int64(c5)), lab.Bytes(int64(cL)), cdiff),
			Goal:   "at most +3 %", Met: met(cdiff <= 3),
			Values: map[string]float64{"first": c5, "last": cL, "diffPercent": cdiff}})
	b.rows = append(b.rows,
		row{Figure: label, Variant: fmt.Sprintf("turns 5–%d (run %d), mean of %d", firstTo, runOf[5], n5),
			Result: fmt.Sprintf("%s, %.1f events added per turn", lab.Bytes(int64(a5)), e5),
			Values: map[string]float64{"bytes": a5}},
		row{Figure: label, Variant: fmt.Sprintf("turns %d–%d (run %d), mean of %d", lastFrom, lastTo, runOf[lastTo], nL),
			Result: fmt.Sprintf("%s, %.1f events added per turn (%+.1f %% vs turns 5–%d)", lab.Bytes(int64(aL)), eL, diff, firstTo),
			Goal:   "at most +3 %", Met: met(diff <= 3),
			Values: map[string]float64{"bytes": aL, "diffPercent": diff}},
	)
	return nil
}

// turnContent is the mean size of the events of turns from..to (all in
// one run) that are not workflow-task events, read from that run's history.
func (b *bench) turnContent(ctx context.Context, session string, runs map[string]int, runOf []int, from, to int) (float64, error) {
	run := runOf[to]
	var runID string
	for id, n := range runs {
		if n == run {
			runID = id
		}
	}
	first := to
	for first > 1 && runOf[first-1] == run {
		first--
	}
	it := b.c.GetWorkflowHistory(ctx, workflows.WorkflowID(session), runID, false, 0)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return 0, err
		}
		h.Events = append(h.Events, ev)
	}
	spans := actions.TurnSpans(h)
	var sum float64
	n := 0
	for k := max(from, first); k <= to; k++ {
		i := k - first
		if i >= len(spans) {
			break
		}
		for _, ev := range h.GetEvents() {
			if ev.GetEventId() < spans[i][0] || ev.GetEventId() > spans[i][1] {
				continue
			}
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
				enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
				continue
			}
			sum += float64(proto.Size(ev))
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("history growth: no turns %d–%d in run %d", from, to, run)
	}
	return sum / float64(n), nil
}

// historyWindow is how many turns the history figure averages at each end.
const historyWindow = 20

// 5. Throughput: sessions × turns on the embedded server, every session
// sending its turns one after the other, all sessions at once.
func (b *bench) throughput() error {
	S, T := b.f.sessions, b.f.turns
	total := S * T
	prefix := "tp-" + b.run
	sessionName := func(s int) string { return fmt.Sprintf("%s-%03d", prefix, s) }
	promptOf := func(s, t int) string { return fmt.Sprintf("%s-s%03d-t%02d", prefix, s, t) }
	var done, failed, noTerm, multiTerm atomic.Int64
	lat := make([]lab.Sample, S)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for s := 0; s < S; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := 0; t < T; t++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				st := time.Now()
				evs := lab.Events(lab.InvokeAgent(ctx, b.dur, sessionName(s), promptOf(s, t), "", nil))
				cancel()
				lat[s] = append(lat[s], time.Since(st))
				term, n, _ := lab.Terminal(evs)
				switch {
				case n == 0:
					noTerm.Add(1)
				case n > 1:
					multiTerm.Add(1)
				}
				if term.Type != agent.TypeCompleted {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, lab.Describe(evs))
				}
				done.Add(1)
			}
		}()
	}
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				b.prog.Logf("%d/%d turns…", done.Load(), total)
			}
		}
	}()
	wg.Wait()
	close(stop)
	elapsed := time.Since(start)
	var all lab.Sample
	slow1, slow5 := 0, 0
	worst, worstS, worstT := time.Duration(0), 0, 0
	for s, l := range lat {
		all = append(all, l...)
		for t, d := range l {
			if d > time.Second {
				slow1++
			}
			if d > 5*time.Second {
				slow5++
			}
			if d > worst {
				worst, worstS, worstT = d, s, t
			}
		}
	}
	if os.Getenv("FASTAGENT_LAB_DEBUG") != "" {
		byTurn := make([]int, T)
		for _, l := range lat {
			for t, d := range l {
				if d > time.Second {
					byTurn[t]++
				}
			}
		}
		fmt.Fprintf(os.Stderr, "turns > 1 s by turn index: %v\n", byTurn)
		b.dumpHistory(sessionName(worstS), fmt.Sprintf("slowest turn: %s, turn %d took %s", sessionName(worstS), worstT, worst))
	}

	b.prog.Logf("checking the session store")
	lost, dup := noTerm.Load(), multiTerm.Load()
	var problems []string
	ctx := context.Background()
	for s := 0; s < S; s++ {
		prompts := make([]string, T)
		for t := range prompts {
			prompts[t] = promptOf(s, t)
		}
		r := lab.CheckTranscript(ctx, b.kit.Store, sessionName(s), prompts, true)
		lost += int64(r.Missing)
		dup += int64(r.Duplicates)
		if len(problems) < 3 {
			for _, p := range r.Problems {
				problems = append(problems, sessionName(s)+": "+p)
			}
		}
	}
	calls := 0
	for _, r := range b.kit.Model.Requests() {
		if strings.HasPrefix(r.LastUserText(), prefix+"-") {
			calls++
		}
	}
	rate := float64(total) / elapsed.Seconds()
	res := fmt.Sprintf("%.0f turns/s (%d in %s); lost %d, duplicated %d, failed %d; %d model calls; %d turns > 1 s, %d > 5 s",
		rate, total, elapsed.Round(100*time.Millisecond), lost, dup, failed.Load(), calls, slow1, slow5)
	if len(problems) > 0 {
		res += "; e.g. " + lab.OneLine(strings.Join(problems, "; "), 200)
	}
	if v := firstErr.Load(); v != nil {
		res += "; first failure: " + lab.OneLine(v.(string), 160)
	}
	b.rows = append(b.rows, row{
		Figure: sectionLabel("throughput"), Variant: fmt.Sprintf("%d sessions × %d turns, durable %s, in-process worker", S, T, b.serverLabel()),
		N: len(all), P50: all.P50(), P99: all.P99(), Result: res,
		Goal: "0 lost, 0 duplicated", Met: met(lost == 0 && dup == 0),
		Values: map[string]float64{"turnsPerSecond": rate, "lost": float64(lost), "duplicated": float64(dup), "failed": float64(failed.Load())},
	})
	return nil
}

// 6. Idle sessions: RSS of a separate worker process holding N sessions
// that each had one turn, and the latency of a turn on a cold session (the
// worker process restarted, so no session is in its cache).
func (b *bench) idleSessions() error {
	bin, err := b.bins.Worker()
	if err != nil {
		return err
	}
	kit, err := lab.NewKit()
	if err != nil {
		return err
	}
	defer kit.Close()
	kit.Model.Handle(lab.StepsHandler(lab.CounterName))
	queue := lab.NewQueue("idle")
	feedURL, note := b.f.nats, ""
	var bus feed.Bus
	if err := lab.NATSReachable(b.f.nats); err != nil {
		feedURL, note = "inprocess", "; no NATS: feed off, terminals after the outcome only"
		bus = feed.NewInProcess()
	} else if bus, err = feed.NewNATS(b.f.nats); err != nil {
		return err
	}
	defer bus.Close()
	a, err := lab.Durable(b.c, kit, bus, queue)
	if err != nil {
		return err
	}
	if feedURL == "inprocess" {
		a.Grace = time.Millisecond
	}
	spec := lab.WorkerSpec{Bin: bin, Kit: kit, TemporalAddress: b.srv.FrontendAddress(), TemporalAPIKey: b.srv.APIKey(), Namespace: b.srv.Namespace(), TaskQueue: queue, Feed: feedURL}
	w, err := lab.StartWorkerProc(spec)
	if err != nil {
		return err
	}
	defer func() { w.Stop(10 * time.Second) }()
	if _, err := timeTurn(a, "idle-warm-"+b.run, "hi"); err != nil {
		return err
	}
	time.Sleep(time.Second)
	rss0, err := w.RSS()
	if err != nil {
		return err
	}

	N := b.f.idle
	if N < 2 {
		return fmt.Errorf("-idle %d: need at least 2 sessions", N)
	}
	name := func(i int) string { return fmt.Sprintf("idle-%s-%05d", b.run, i) }
	var next, done, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for g := 0; g < b.f.idleConc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= N {
					return
				}
				if _, err := timeTurn(a, name(i), "hello"); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				b.prog.Printf("%d/%d sessions…", done.Add(1), N)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		return fmt.Errorf("%d of %d first turns failed; first: %v", failed.Load(), N, firstErr.Load())
	}
	time.Sleep(2 * time.Second)
	rss1, err := w.RSS()
	if err != nil {
		return err
	}

	// Two disjoint sets of sessions: warm turns before the restart, cold after.
	M := min(b.f.coldSessions, N/2)
	pick := func(set, j int) string { return name((2*j + set) * (N / (2 * M)) % N) }
	var warm, cold lab.Sample
	for j := 0; j < M; j++ {
		d, err := timeTurn(a, pick(0, j), "again")
		if err != nil {
			return err
		}
		warm = append(warm, d)
	}
	b.prog.Logf("restarting the worker process (SIGTERM, then a new one)")
	w.Stop(30 * time.Second)
	if w, err = lab.StartWorkerProc(spec); err != nil {
		return err
	}
	if _, err := timeTurn(a, "idle-warm2-"+b.run, "hi"); err != nil {
		return err
	}
	worst, worstJ := time.Duration(0), 0
	for j := 0; j < M; j++ {
		d, err := timeTurn(a, pick(1, j), "again")
		if err != nil {
			return err
		}
		cold = append(cold, d)
		if d > worst {
			worst, worstJ = d, j
		}
	}
	if os.Getenv("FASTAGENT_LAB_DEBUG") != "" {
		b.dumpHistory(pick(1, worstJ), fmt.Sprintf("slowest cold turn: %s (#%d) took %s", pick(1, worstJ), worstJ, worst))
	}
	rss2, _ := w.RSS()

	label := sectionLabel("idle")
	per := float64(rss1-rss0) / float64(N)
	b.rows = append(b.rows,
		row{Figure: label, Variant: "worker process RSS (VmRSS)",
			Result: fmt.Sprintf("%s before → %s after %d sessions (%s/session); %s after restart + %d cold turns%s",
				lab.Bytes(rss0), lab.Bytes(rss1), N, lab.Bytes(int64(per)), lab.Bytes(rss2), M, note),
			Values: map[string]float64{"rssBefore": float64(rss0), "rssAfter": float64(rss1), "bytesPerSession": per, "rssAfterRestart": float64(rss2)}},
		row{Figure: label, Variant: "turn on a warm session (cached)", N: len(warm), P50: warm.P50(), P99: warm.P99()},
		row{Figure: label, Variant: "turn on a cold session (worker restarted)", N: len(cold), P50: cold.P50(), P99: cold.P99(),
			Result: lab.SignedMs(cold.P50()-warm.P50()) + " p50 vs warm"},
	)
	return nil
}

// 7. Cold start: `fastagent dev` (full build) on a fresh state dir until
// GET /health answers 200.
func (b *bench) coldStart() error {
	b.prog.Logf("building the full fastagent binary (minutes when the build cache is cold)")
	bin, err := b.bins.Full()
	if err != nil {
		return err
	}
	var s lab.Sample
	for i := 0; i < b.f.coldRuns; i++ {
		d, err := devColdStart(bin, b.kit.ProcessEnv())
		if err != nil {
			return err
		}
		s = append(s, d)
		b.prog.Logf("%d/%d: %s", i+1, b.f.coldRuns, d.Round(time.Millisecond))
	}
	b.rows = append(b.rows, row{
		Figure: sectionLabel("coldstart"), Variant: "fastagent dev → GET /health 200, fresh state dir",
		N: len(s), P50: s.P50(), P99: s.P99(),
		Result: fmt.Sprintf("median %s (min %s, max %s)", s.P50().Round(time.Millisecond), s.Percentile(0.1).Round(time.Millisecond), s.Percentile(100).Round(time.Millisecond)),
		Values: map[string]float64{"medianMs": lab.MsOf(s.P50())},
	})
	return nil
}

// devColdStart starts `fastagent dev` in a new workspace and times it to
// the first 200 from /health.
func devColdStart(bin string, env []string) (time.Duration, error) {
	ws, err := os.MkdirTemp("", "fastagent-lab-cold-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(ws)
	port, err := lab.FreePort()
	if err != nil {
		return 0, err
	}
	tport, err := lab.FreePort()
	if err != nil {
		return 0, err
	}
	p, err := lab.StartProc(bin, []string{"dev", "--dir", ws, "--port", strconv.Itoa(port),
		"--temporal-port", strconv.Itoa(tport), "--no-ui", "--log-level", "warn"}, env)
	if err != nil {
		return 0, err
	}
	defer p.Stop(10 * time.Second)
	d, err := waitHealthy(p, fmt.Sprintf("http://127.0.0.1:%d/health", port), time.Minute)
	return d, err
}

// waitHealthy polls url every 5 ms until it answers 200; the duration is
// measured from the process start.
func waitHealthy(p *lab.Proc, url string, limit time.Duration) (time.Duration, error) {
	hc := &http.Client{Timeout: time.Second}
	deadline := p.Started.Add(limit)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(p.Started), nil
			}
		}
		select {
		case <-p.Done():
			return 0, fmt.Errorf("fastagent dev exited before /health was 200:\n%s", p.Output())
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("fastagent dev: /health not 200 after %s:\n%s", limit, p.Output())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dumpHistory prints the event types and times of a session's current run
// to stderr (FASTAGENT_LAB_DEBUG), to see where a slow turn spent its time.
func (b *bench) dumpHistory(session, title string) {
	ctx := context.Background()
	fmt.Fprintf(os.Stderr, "--- %s\n", title)
	it := b.c.GetWorkflowHistory(ctx, workflows.WorkflowID(session), "", false, 0)
	var prev time.Time
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return
		}
		t := ev.GetEventTime().AsTime()
		gap := time.Duration(0)
		if !prev.IsZero() {
			gap = t.Sub(prev)
		}
		prev = t
		fmt.Fprintf(os.Stderr, "%4d %s +%-8s %s\n", ev.GetEventId(), t.Format("15:04:05.000"), gap.Round(time.Millisecond), ev.GetEventType())
	}
	fmt.Fprintln(os.Stderr, "---")
}
