package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/localagent"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// benchFlags are the sizes of the benchmark; the defaults are the issue's.
type benchFlags struct {
	n            int
	steps        int
	sessions     int
	turns        int
	idle         int
	idleConc     int
	idleHeapProf string
	coldSessions int
	history      int
	coldRuns     int
	only         string
	json         bool
	out          string
	nats         string
	untuned      bool
	// server is where the Temporal server runs: embedded, or process (its
	// own process, as deployments run it).
	server    string
	slackN    int
	feishuN   int
	webhookN  int
	wfPollers int
	// cpuProf and memProf name the files the profiles of this process
	// (the bench worker, its clients and the in-process loop; not the
	// Temporal server, a child process) are written to.
	cpuProf string
	memProf string
	// dynConfig overrides dynamic config values of the embedded server.
	dynConfig string
}

// sections in the order they run.
var benchSections = []string{"overhead", "steps", "ttft", "history", "throughput", "idle", "idleheap", "coldstart", "slack", "feishu", "webhook", "actions"}

// row is one line of the table.
type row struct {
	Figure  string             `json:"figure"`
	Variant string             `json:"variant"`
	N       int                `json:"n,omitempty"`
	P50     time.Duration      `json:"p50Ns,omitempty"`
	P99     time.Duration      `json:"p99Ns,omitempty"`
	Result  string             `json:"result,omitempty"`
	Goal    string             `json:"goal,omitempty"`
	Met     string             `json:"met,omitempty"`
	Values  map[string]float64 `json:"values,omitempty"`
}

type benchReport struct {
	Title   string      `json:"title"`
	Started time.Time   `json:"started"`
	Machine lab.Machine `json:"machine"`
	Flags   string      `json:"flags"`
	Rows    []row       `json:"rows"`
	// Dists are the measured latencies behind the latency rows, drawn in
	// bench.svg.
	Dists []lab.Dist `json:"distributions,omitempty"`
}

// bench holds the shared stack: one tuned embedded server, one workspace
// with the counter tool, an in-process loop and a durable agent with an
// in-process worker.
type bench struct {
	f     benchFlags
	prog  *lab.Progress
	srv   lab.Temporal
	c     client.Client
	kit   *lab.Kit
	local *localagent.Agent
	dur   *durable.Agent
	// rt is the runtime of the durable variant (worker, agent, ingress).
	rt     *serve.Parts
	busL   feed.Bus
	busD   feed.Bus
	queue  string
	worker sdkworker.Worker
	floor  *lab.Floor
	bins   lab.Binaries
	run    string
	rows   []row
	dists  []lab.Dist
	// base keeps the turn-overhead samples for the step figure.
	base *pairSample
}

// pairSample holds one figure's rounds: round i ran the same turn on the
// in-process loop, the durable agent and the bare Temporal floor, one after
// the other, so that diff[i] = durable[i] − local[i] is a paired difference.
type pairSample struct{ local, durable, floor, diff lab.Sample }

func runBench(args []string) error {
	var f benchFlags
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&f.n, "n", 200, "measured turns per variant for the turn, step and first-token figures")
	fs.IntVar(&f.steps, "steps", 5, "sequential tool calls in the step figure's turn")
	fs.IntVar(&f.sessions, "sessions", 100, "concurrent sessions in the throughput figure")
	fs.IntVar(&f.turns, "turns", 10, "turns per session in the throughput figure")
	fs.IntVar(&f.idle, "idle", 10000, "idle sessions (one turn each) in the memory figure")
	fs.StringVar(&f.idleHeapProf, "idle-heapprofile", "", "write the heap profile (inuse_space) after the idleheap figure's sessions to this file")
	fs.IntVar(&f.idleConc, "idle-concurrency", 32, "concurrent turns while creating idle sessions")
	fs.IntVar(&f.coldSessions, "cold", 20, "turns on cold sessions after the worker restart")
	fs.IntVar(&f.history, "history", 500, "turns of the history-growth session (compares turns 5–24 with the last 20)")
	fs.IntVar(&f.coldRuns, "coldstart", 5, "fastagent dev cold starts (median)")
	fs.IntVar(&f.slackN, "slack-n", 50, "measured webhook deliveries (distinct threads) in the Slack figure")
	fs.IntVar(&f.webhookN, "webhook-n", 200, "measured signed deliveries in the webhook figure (no worker running)")
	fs.IntVar(&f.feishuN, "feishu-n", 50, "measured events per transport (webhook, websocket) in the Feishu figure")
	fs.StringVar(&f.only, "only", "", "comma-separated sections to run: "+strings.Join(benchSections, ","))
	fs.BoolVar(&f.json, "json", false, "print JSON instead of the table")
	fs.StringVar(&f.out, "out", "bench-out", "directory to write bench.json and bench.svg into (empty: write nothing)")
	fs.StringVar(&f.nats, "nats", envOr("FASTAGENT_LAB_NATS", "nats://127.0.0.1:4222"), "NATS URL for the multi-process figures")
	fs.IntVar(&f.wfPollers, "wf-pollers", 0, "workflow task pollers of the bench worker: 0 autoscaled (the default), n ≥ 2 fixed (2 was the default before)")
	fs.StringVar(&f.server, "server", "embedded", "the Temporal server: embedded (the dev server, a child of this process), or process (the same server started by a process of its own; the actions figure needs embedded)")
	fs.StringVar(&f.cpuProf, "cpuprofile", "", "write a CPU profile of this process over the measured sections to this file (go tool pprof -top)")
	fs.StringVar(&f.memProf, "memprofile", "", "write an allocation profile of this process, taken after the measured sections, to this file (go tool pprof -sample_index=alloc_space -top)")
	fs.StringVar(&f.dynConfig, "dynconfig", "", "comma-separated key=value dynamic config values of the embedded server, on top of its tuning (or of the stock configuration with -untuned), e.g. system.enableActivityEagerExecution=false")
	fs.BoolVar(&f.untuned, "untuned", false, "use the embedded server's stock configuration (the tuning comparison runs this in a child process)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	selected, err := selectSections(f.only, benchSections)
	if err != nil {
		return err
	}
	b := &bench{f: f, run: fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)}
	b.prog = &lab.Progress{W: os.Stderr, Total: len(selected)}
	report := benchReport{
		Title:   "fastagent bench",
		Started: time.Now().UTC(),
		Machine: lab.MachineFacts(),
		Flags:   strings.Join(args, " "),
	}
	defer b.bins.Close()
	if err := b.setup(); err != nil {
		return err
	}
	defer b.teardown()
	stopProfiles, err := startProfiles(f.cpuProf, f.memProf)
	if err != nil {
		return err
	}

	for i, name := range selected {
		label := sectionLabel(name)
		if f.untuned {
			b.prog.Step(i+1, label+" (untuned server)")
		} else {
			b.prog.Step(i+1, label)
		}
		var err error
		switch name {
		case "overhead":
			err = b.overhead()
		case "steps":
			err = b.stepOverhead()
		case "ttft":
			err = b.ttft()
		case "history":
			err = b.historyGrowth()
		case "throughput":
			err = b.throughput()
		case "idle":
			err = b.idleSessions()
		case "idleheap":
			err = b.idleHeap()
		case "coldstart":
			err = b.coldStart()
		case "slack":
			err = b.slackFigures()
		case "feishu":
			err = b.feishuFigures()
		case "webhook":
			err = b.webhookFigures()
		case "actions":
			err = b.actionsFigures()
		}
		if err != nil {
			b.prog.Logf("error: %v", err)
			b.rows = append(b.rows, row{Figure: label, Variant: "error", Result: lab.OneLine(err.Error(), 160)})
		}
	}
	if err := stopProfiles(); err != nil {
		return err
	}
	report.Rows, report.Dists = b.rows, b.dists
	if f.out != "" {
		if err := writeBenchOut(f.out, report); err != nil {
			return err
		}
		b.prog.Logf("wrote %s and %s", filepath.Join(f.out, "bench.json"), filepath.Join(f.out, "bench.svg"))
	}
	if f.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	printBench(os.Stdout, report)
	return nil
}

// startProfiles starts a CPU profile into cpu (when set) and returns the
// function that stops it and writes the allocation profile into mem (when
// set). Allocations are counted from here on: the profile rate is set
// before the measured sections run.
func startProfiles(cpu, mem string) (func() error, error) {
	if mem != "" {
		runtime.MemProfileRate = 64 * 1024
	}
	var cf *os.File
	if cpu != "" {
		var err error
		if cf, err = os.Create(cpu); err != nil {
			return nil, fmt.Errorf("bench: -cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(cf); err != nil {
			_ = cf.Close()
			return nil, fmt.Errorf("bench: -cpuprofile: %w", err)
		}
	}
	return func() error {
		if cf != nil {
			pprof.StopCPUProfile()
			if err := cf.Close(); err != nil {
				return fmt.Errorf("bench: -cpuprofile: %w", err)
			}
		}
		if mem == "" {
			return nil
		}
		mf, err := os.Create(mem)
		if err != nil {
			return fmt.Errorf("bench: -memprofile: %w", err)
		}
		defer mf.Close()
		if err := pprof.Lookup("allocs").WriteTo(mf, 0); err != nil {
			return fmt.Errorf("bench: -memprofile: %w", err)
		}
		return nil
	}, nil
}

// writeBenchOut writes the report as dir/bench.json and its latency
// distributions as dir/bench.svg.
func writeBenchOut(dir string, r benchReport) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench output: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench output: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench output: %w", err)
	}
	var svg bytes.Buffer
	title := fmt.Sprintf("%s — %s — %s", r.Title, r.Started.Format("2006-01-02 15:04 MST"), r.Machine)
	if err := lab.WriteSVG(&svg, title, r.Dists); err != nil {
		return fmt.Errorf("bench chart: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.svg"), svg.Bytes(), 0o644); err != nil {
		return fmt.Errorf("bench chart: %w", err)
	}
	return nil
}

func sectionLabel(name string) string {
	switch name {
	case "overhead":
		return "1 turn overhead"
	case "steps":
		return "2 step overhead"
	case "ttft":
		return "3 first token at SSE client"
	case "history":
		return "4 history growth"
	case "throughput":
		return "5 throughput"
	case "idle":
		return "6 idle sessions"
	case "idleheap":
		return "6b idle sessions, live heap"
	case "coldstart":
		return "7 cold start"
	case "slack":
		return "8 Slack channel"
	case "feishu":
		return "9 Feishu channel"
	case "webhook":
		return "10 webhook endpoint"
	case "actions":
		return "11 billable actions per turn"
	}
	return name
}

func printBench(w io.Writer, r benchReport) {
	fmt.Fprintf(w, "%s — %s\n", r.Title, r.Started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "machine: %s\n", r.Machine)
	if r.Flags != "" {
		fmt.Fprintf(w, "flags: %s\n", r.Flags)
	}
	fmt.Fprintln(w)
	t := lab.Table{Header: []string{"figure", "variant", "n", "p50", "p99", "result", "goal", "met"}}
	for _, x := range r.Rows {
		n, p50, p99 := "", "", ""
		if x.N > 0 {
			n = fmt.Sprint(x.N)
		}
		if x.P50 > 0 {
			p50, p99 = lab.Ms(x.P50), lab.Ms(x.P99)
		}
		t.Add(x.Figure, x.Variant, n, p50, p99, x.Result, x.Goal, x.Met)
	}
	t.Fprint(w)
}

func (b *bench) setup() error {
	var err error
	dyn, err := parseDynConfig(b.f.dynConfig)
	if err != nil {
		return err
	}
	switch b.f.server {
	case "embedded":
		b.srv, err = lab.StartServer(lab.ServerOptions{Untuned: b.f.untuned, DynamicConfig: dyn})
	case "process":
		if dyn != nil {
			return errors.New("bench: -dynconfig needs -server embedded")
		}
		var bin string
		if bin, err = os.Executable(); err == nil {
			b.srv, err = lab.StartServerProcess(bin)
		}
	default:
		err = fmt.Errorf("bench: -server is embedded or process (got %q)", b.f.server)
	}
	if err != nil {
		return err
	}
	ctx := context.Background()
	if b.c, err = b.srv.Dial(ctx); err != nil {
		return err
	}
	if b.kit, err = lab.NewKit(); err != nil {
		return err
	}
	b.kit.Model.Handle(lab.StepsHandler(lab.CounterName))
	b.busL, b.busD = feed.NewInProcess(), feed.NewInProcess()
	b.local = b.kit.Local(b.busL)
	b.queue = lab.NewQueue("bench")
	// One worker runs the session workflow and the floor workflow, so both
	// see the same worker tuning and the same embedded server.
	if b.rt, err = b.kit.Runtime(b.busD, b.queue, func(_ *serve.Config, w *serve.Components) { w.WorkflowTaskPollers = b.f.wfPollers }); err != nil {
		return err
	}
	w, err := b.rt.Worker(ctx, b.c)
	if err != nil {
		return err
	}
	b.worker = w
	lab.RegisterFloor(b.worker)
	if err := b.worker.Start(); err != nil {
		b.worker = nil
		return fmt.Errorf("start worker: %w", err)
	}
	b.dur = b.rt.Agent(b.c)
	b.floor = &lab.Floor{Client: b.c, TaskQueue: b.queue}
	return nil
}

// parseDynConfig reads -dynconfig: key=value pairs, values read as a
// bool, an integer, a number or else a string.
func parseDynConfig(s string) (map[string]any, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]any{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("bench: -dynconfig: %q is not key=value", kv)
		}
		if b, err := strconv.ParseBool(v); err == nil {
			out[k] = b
		} else if n, err := strconv.Atoi(v); err == nil {
			out[k] = n
		} else if x, err := strconv.ParseFloat(v, 64); err == nil {
			out[k] = x
		} else {
			out[k] = v
		}
	}
	return out, nil
}

func (b *bench) teardown() {
	if b.worker != nil {
		b.worker.Stop()
	}
	if b.kit != nil {
		b.kit.Close()
	}
	if b.c != nil {
		b.c.Close()
	}
	if b.srv != nil {
		b.srv.Close()
	}
}

func (b *bench) serverLabel() string {
	if b.f.server == "process" {
		return "server in its own process"
	}
	if b.f.untuned {
		return "embedded untuned"
	}
	return "embedded tuned"
}

// timeTurn runs one turn and times it from Invoke to the terminal.
func timeTurn(a agent.Agent, session, text string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	rs := lab.InvokeAgent(ctx, a, session, text, "", nil)
	d := time.Since(start)
	evs := lab.Events(rs)
	if term, _, ok := lab.Terminal(evs); !ok || term.Type != agent.TypeCompleted {
		return d, fmt.Errorf("turn in %s did not complete: %s", session, lab.Describe(evs))
	}
	return d, nil
}

// pairTurns runs warm+n rounds over 10 sessions each; a round is one
// in-process turn, the same turn on the durable agent and a floor turn of
// the durable turn's shape (steps tool calls), back to back so that all
// three see the same machine load. The order rotates from round to round,
// so that work a turn leaves running after its reply (Turn.Record, the
// floor's trailing activity) weighs on each variant alike.
func (b *bench) pairTurns(tag, text string, steps, n int) (*pairSample, error) {
	const sessions, warm = 10, 10
	p := &pairSample{}
	shape := lab.TurnShape(steps)
	for i := 0; i < warm+n; i++ {
		s := fmt.Sprintf("%s-%s-%d", tag, b.run, i%sessions)
		var dl, dd, df time.Duration
		runs := []func() error{
			func() (err error) { dl, err = timeTurn(b.local, "loc-"+s, text); return err },
			func() (err error) { dd, err = timeTurn(b.dur, "dur-"+s, text); return err },
			func() (err error) { df, err = b.floorTurn("flr-"+s, shape); return err },
		}
		for j := range runs {
			if err := runs[(i+j)%len(runs)](); err != nil {
				return nil, err
			}
		}
		if i >= warm {
			p.local = append(p.local, dl)
			p.durable = append(p.durable, dd)
			p.floor = append(p.floor, df)
			p.diff = append(p.diff, dd-dl)
		}
		b.prog.Printf("%d/%d rounds", max(0, i+1-warm), n)
	}
	return p, nil
}

func (b *bench) floorTurn(session string, shape lab.FloorShape) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return b.floor.Turn(ctx, session, shape)
}

// addDist keeps a variant's latencies for the chart.
func (b *bench) addDist(figure, variant string, s lab.Sample) {
	b.dists = append(b.dists, lab.Dist{Figure: figure, Variant: variant, Sample: s})
}

// 1. Turn overhead: one model call, no tools, zero model latency. The added
// latency is the distribution of paired differences (durable − in-process
// of the same round); the floor is a bare Temporal turn of the same shape.
func (b *bench) overhead() error {
	p, err := b.pairTurns("ovh", "hi", 0, b.f.n)
	if err != nil {
		return err
	}
	b.base = p
	added, added99 := p.diff.P50(), p.diff.P99()
	floor := p.floor.P50()
	label := sectionLabel("overhead")
	durName := "durable, " + b.serverLabel()
	floorName := fmt.Sprintf("bare Temporal floor, %s (%s)", b.serverLabel(), shapeLabel(lab.TurnShape(0)))
	b.rows = append(b.rows,
		row{Figure: label, Variant: "in-process loop (localagent)", N: len(p.local), P50: p.local.P50(), P99: p.local.P99()},
		row{Figure: label, Variant: floorName, N: len(p.floor), P50: p.floor.P50(), P99: p.floor.P99()},
		row{Figure: label, Variant: durName, N: len(p.durable), P50: p.durable.P50(), P99: p.durable.P99(),
			Result: fmt.Sprintf("added per paired turn: p50 %s, p99 %s; p50 added = %s of the floor",
				lab.SignedMs(added), lab.SignedMs(added99), lab.Ratio(added, floor)),
			Goal: "≤ 15 ms p50 added", Met: met(added <= 15*time.Millisecond),
			Values: map[string]float64{
				"addedP50Ms": lab.MsOf(added), "addedP99Ms": lab.MsOf(added99),
				"floorP50Ms": lab.MsOf(floor), "floorP99Ms": lab.MsOf(p.floor.P99()),
				"addedP50OverFloorP50": ratioOf(added, floor),
			}},
	)
	b.rows = append(b.rows, floorRatio(label, "durable turn ÷ bare floor turn", p.durable, p.floor))
	b.addDist(label, "in-process loop", p.local)
	b.addDist(label, "bare Temporal floor, "+b.serverLabel(), p.floor)
	b.addDist(label, durName, p.durable)
	if b.f.untuned || b.f.server != "embedded" {
		return nil
	}
	b.prog.Logf("running the same figure on an untuned embedded server (child process)")
	r, err := b.untunedChild()
	if err != nil {
		b.rows = append(b.rows, row{Figure: label, Variant: "durable, embedded untuned", Result: "error: " + lab.OneLine(err.Error(), 120)})
		return nil
	}
	for _, x := range r.Rows {
		if strings.HasPrefix(x.Variant, "durable") || strings.HasPrefix(x.Variant, "bare Temporal floor") {
			if strings.HasPrefix(x.Result, "added") {
				x.Result += " (vs its own in-process run)"
			}
			x.Goal, x.Met = "(stock config, for comparison)", ""
			b.rows = append(b.rows, x)
		}
	}
	for _, d := range r.Dists {
		if d.Variant != "in-process loop" {
			b.dists = append(b.dists, d)
		}
	}
	return nil
}

// floorRatio is the row that compares a durable figure with the bare
// Temporal floor measured in the same run: p50 over p50, p99 over p99.
func floorRatio(figure, variant string, durable, floor lab.Sample) row {
	r50, r99 := ratioOf(durable.P50(), floor.P50()), ratioOf(durable.P99(), floor.P99())
	return row{Figure: figure, Variant: variant, N: len(durable),
		Result: fmt.Sprintf("p50 %.2f× (%s / %s), p99 %.2f× (%s / %s)", r50, lab.SignedMs(durable.P50()), lab.SignedMs(floor.P50()),
			r99, lab.SignedMs(durable.P99()), lab.SignedMs(floor.P99())),
		Goal: "≤ 1.1× the floor (p50)", Met: met(r50 > 0 && r50 <= 1.1),
		Values: map[string]float64{"durableOverFloorP50": r50, "durableOverFloorP99": r99}}
}

// shapeLabel says what a floor turn does.
func shapeLabel(s lab.FloorShape) string {
	return fmt.Sprintf("1 update: %d local + %d empty activities, reply, %d after", s.Local, s.Activities, s.After)
}

// ratioOf is a/b, or 0 when b is not positive.
func ratioOf(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// untunedChild runs the turn-overhead figure in a child process whose
// embedded server has the stock configuration.
func (b *bench) untunedChild() (*benchReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "bench", "-untuned", "-only", "overhead", "-json", "-out", "", "-n", fmt.Sprint(b.f.n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("untuned child: %w", err)
	}
	var r benchReport
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("untuned child output: %w", err)
	}
	return &r, nil
}

// 2. Step overhead: a turn with k sequential tool calls (k+1 model calls).
// Each round's paired difference, net of the plain turn's p50 difference
// and divided by k, is one per-step sample; the floor's per-step figure is
// built the same way from floor turns of both shapes.
func (b *bench) stepOverhead() error {
	if b.base == nil {
		b.prog.Logf("measuring the plain-turn baseline first")
		p, err := b.pairTurns("ovh", "hi", 0, b.f.n)
		if err != nil {
			return err
		}
		b.base = p
	}
	k := b.f.steps
	if k <= 0 {
		return fmt.Errorf("-steps %d: need at least one tool step", k)
	}
	p, err := b.pairTurns("stp", fmt.Sprintf("[steps=%d] count", k), k, b.f.n)
	if err != nil {
		return err
	}
	perStep := func(turns lab.Sample, base time.Duration) lab.Sample {
		out := make(lab.Sample, len(turns))
		for i, d := range turns {
			out[i] = (d - base) / time.Duration(k)
		}
		return out
	}
	added := perStep(p.diff, b.base.diff.P50())
	floor := perStep(p.floor, b.base.floor.P50())
	perP50, perP99 := added.P50(), added.P99()
	label := sectionLabel("steps")
	durName := fmt.Sprintf("durable %s, %d tool steps", b.serverLabel(), k)
	b.rows = append(b.rows,
		row{Figure: label, Variant: fmt.Sprintf("in-process loop, %d tool steps", k), N: len(p.local), P50: p.local.P50(), P99: p.local.P99()},
		row{Figure: label, Variant: fmt.Sprintf("bare Temporal floor, %d tool steps (%s)", k, shapeLabel(lab.TurnShape(k))),
			N: len(p.floor), P50: p.floor.P50(), P99: p.floor.P99(),
			Result: fmt.Sprintf("%s per step p50 (p99 %s)", lab.SignedMs(floor.P50()), lab.SignedMs(floor.P99()))},
		row{Figure: label, Variant: durName, N: len(p.durable), P50: p.durable.P50(), P99: p.durable.P99(),
			Result: fmt.Sprintf("added per step, paired, net of the turn overhead: p50 %s, p99 %s; p50 = %s of the floor's step",
				lab.SignedMs(perP50), lab.SignedMs(perP99), lab.Ratio(perP50, floor.P50())),
			Goal: "≤ 10 ms p50 per step", Met: met(perP50 <= 10*time.Millisecond),
			Values: map[string]float64{
				"perStepP50Ms": lab.MsOf(perP50), "perStepP99Ms": lab.MsOf(perP99),
				"floorPerStepP50Ms":          lab.MsOf(floor.P50()),
				"perStepP50OverFloorStepP50": ratioOf(perP50, floor.P50()),
			}},
	)
	// The durable agent's own step, built like the floor's: its k-step
	// turns net of its plain turn's p50, per step.
	b.rows = append(b.rows, floorRatio(label, "durable tool step ÷ bare floor step", perStep(p.durable, b.base.durable.P50()), floor))
	b.addDist(label, fmt.Sprintf("in-process loop, %d steps", k), p.local)
	b.addDist(label, fmt.Sprintf("bare Temporal floor, %d steps", k), p.floor)
	b.addDist(label, durName, p.durable)
	return nil
}

// 3. Time to first token at an SSE client: from the model server's first
// delta write to the client's receipt of the first text event, over real
// HTTP through the ingress.
func (b *bench) ttft() error {
	type variant struct {
		name string
		url  string
		s    lab.Sample
	}
	var vs []*variant
	add := func(name string, a agent.Agent) error {
		h, err := lab.ServeIngress(b.rt, a)
		if err != nil {
			return err
		}
		vs = append(vs, &variant{name: name, url: h.URL})
		return nil
	}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	if err := add("in-process agent behind the ingress", b.local); err != nil {
		return err
	}
	if err := add("durable, in-process feed", b.dur); err != nil {
		return err
	}
	natsNote := ""
	if err := lab.NATSReachable(b.f.nats); err != nil {
		natsNote = fmt.Sprintf("skipped: NATS not reachable at %s (%v)", b.f.nats, err)
	} else {
		pub, err := feed.NewNATS(b.f.nats, feed.WithName("fastagent-lab-worker"))
		if err != nil {
			return err
		}
		sub, err := feed.NewNATS(b.f.nats, feed.WithName("fastagent-lab-ingress"))
		if err != nil {
			_ = pub.Close()
			return err
		}
		closers = append(closers, func() { _ = pub.Close(); _ = sub.Close() })
		q := lab.NewQueue("ttft-nats")
		w, err := lab.StartWorker(b.c, b.kit, pub, q)
		if err != nil {
			return err
		}
		closers = append(closers, w.Stop)
		a, err := lab.Durable(b.c, b.kit, sub, q)
		if err != nil {
			return err
		}
		if err := add("durable, NATS feed (2 connections)", a); err != nil {
			return err
		}
	}

	firsts := newFirstDeltas()
	b.kit.Model.OnFirstDelta(firsts.record)
	defer b.kit.Model.OnFirstDelta(nil)
	const warm = 10
	for i := 0; i < warm+b.f.n; i++ {
		for vi, v := range vs {
			session := fmt.Sprintf("ttft-%s-%d-%d", b.run, vi, i%10)
			prompt := fmt.Sprintf("ttft %s %d %d", b.run, vi, i)
			d, err := firstTokenOverHTTP(v.url, session, prompt, firsts)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			if i >= warm {
				v.s = append(v.s, d)
			}
		}
		b.prog.Printf("%d/%d turns each", max(0, i+1-warm), b.f.n)
	}
	label := sectionLabel("ttft")
	for i, v := range vs {
		r := row{Figure: label, Variant: v.name, N: len(v.s), P50: v.s.P50(), P99: v.s.P99()}
		if i > 0 {
			// Round i measured every variant back to back: pair them.
			d, err := lab.Paired(vs[0].s, v.s)
			if err != nil {
				return err
			}
			added := d.P50()
			r.Result = fmt.Sprintf("added per paired turn: p50 %s, p99 %s", lab.SignedMs(added), lab.SignedMs(d.P99()))
			r.Goal, r.Met = "≤ 5 ms p50 added", met(added <= 5*time.Millisecond)
			r.Values = map[string]float64{"addedP50Ms": lab.MsOf(added), "addedP99Ms": lab.MsOf(d.P99())}
		}
		b.rows = append(b.rows, r)
		b.addDist(label, v.name, v.s)
	}
	if natsNote != "" {
		b.rows = append(b.rows, row{Figure: label, Variant: "durable, NATS feed", Result: natsNote})
	}
	return nil
}

// firstDeltas records, per prompt, when the model server flushed the first
// delta of its reply.
type firstDeltas struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func newFirstDeltas() *firstDeltas { return &firstDeltas{m: map[string]time.Time{}} }

func (f *firstDeltas) record(req modelserver.Request, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[req.LastUserText()] = at
}

func (f *firstDeltas) load(prompt string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.m[prompt]
	return at, ok
}

func firstTokenOverHTTP(url, session, prompt string, f *firstDeltas) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var first time.Time
	rs, err := lab.InvokeHTTP(ctx, url, session, prompt, "", func(r lab.Received) {
		if r.Type == agent.TypeText && first.IsZero() {
			first = r.At
		}
	})
	if err != nil {
		return 0, err
	}
	evs := lab.Events(rs)
	if term, _, ok := lab.Terminal(evs); !ok || term.Type != agent.TypeCompleted {
		return 0, fmt.Errorf("turn did not complete: %s", lab.Describe(evs))
	}
	at, ok := f.load(prompt)
	if !ok || first.IsZero() {
		return 0, fmt.Errorf("no first delta recorded for %q (text seen: %v)", prompt, !first.IsZero())
	}
	return first.Sub(at), nil
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

func selectSections(only string, all []string) ([]string, error) {
	if only == "" {
		return all, nil
	}
	var out []string
	for _, s := range strings.Split(only, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(all, s) {
			return nil, fmt.Errorf("-only: unknown section %q (known: %s)", s, strings.Join(all, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
