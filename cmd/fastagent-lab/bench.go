package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/lab"
	"github.com/fastagent/fastagent/internal/localagent"
	"github.com/fastagent/fastagent/internal/modelserver"
)

// benchFlags are the sizes of the benchmark; the defaults are the issue's.
type benchFlags struct {
	n            int
	steps        int
	sessions     int
	turns        int
	idle         int
	idleConc     int
	coldSessions int
	history      int
	coldRuns     int
	only         string
	json         bool
	nats         string
	untuned      bool
}

// sections in the order they run.
var benchSections = []string{"overhead", "steps", "ttft", "history", "throughput", "idle", "coldstart"}

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
}

// bench holds the shared stack: one tuned embedded server, one workspace
// with the counter tool, an in-process loop and a durable agent with an
// in-process worker.
type bench struct {
	f      benchFlags
	prog   *lab.Progress
	srv    *lab.Server
	c      client.Client
	kit    *lab.Kit
	local  *localagent.Agent
	dur    *durable.Agent
	busL   feed.Bus
	busD   feed.Bus
	queue  string
	worker sdkworker.Worker
	bins   lab.Binaries
	run    string
	rows   []row
	// base keeps the turn-overhead samples for the step figure.
	base *pairSample
}

type pairSample struct{ local, durable lab.Sample }

func runBench(args []string) error {
	var f benchFlags
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&f.n, "n", 200, "measured turns per variant for the turn, step and first-token figures")
	fs.IntVar(&f.steps, "steps", 5, "sequential tool calls in the step figure's turn")
	fs.IntVar(&f.sessions, "sessions", 100, "concurrent sessions in the throughput figure")
	fs.IntVar(&f.turns, "turns", 10, "turns per session in the throughput figure")
	fs.IntVar(&f.idle, "idle", 10000, "idle sessions (one turn each) in the memory figure")
	fs.IntVar(&f.idleConc, "idle-concurrency", 32, "concurrent turns while creating idle sessions")
	fs.IntVar(&f.coldSessions, "cold", 20, "turns on cold sessions after the worker restart")
	fs.IntVar(&f.history, "history", 500, "turns of the history-growth session (compares turn 5 with the last)")
	fs.IntVar(&f.coldRuns, "coldstart", 5, "fastagent dev cold starts (median)")
	fs.StringVar(&f.only, "only", "", "comma-separated sections to run: "+strings.Join(benchSections, ","))
	fs.BoolVar(&f.json, "json", false, "print JSON instead of the table")
	fs.StringVar(&f.nats, "nats", envOr("FASTAGENT_LAB_NATS", "nats://127.0.0.1:4222"), "NATS URL for the multi-process figures")
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
		case "coldstart":
			err = b.coldStart()
		}
		if err != nil {
			b.prog.Logf("error: %v", err)
			b.rows = append(b.rows, row{Figure: label, Variant: "error", Result: oneLine(err.Error(), 160)})
		}
	}
	report.Rows = b.rows
	if f.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	printBench(os.Stdout, report)
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
	case "coldstart":
		return "7 cold start"
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
	b.srv, err = lab.StartServer(lab.ServerOptions{Untuned: b.f.untuned})
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
	if b.worker, err = lab.StartWorker(b.c, b.kit, b.busD, b.queue); err != nil {
		return err
	}
	b.dur = lab.Durable(b.c, b.busD, b.queue)
	return nil
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

// pairTurns runs warm+n rounds of one in-process and one durable turn,
// interleaved so that both see the same machine load, over 10 sessions each.
func (b *bench) pairTurns(tag, text string, n int) (*pairSample, error) {
	const sessions, warm = 10, 10
	p := &pairSample{}
	for i := 0; i < warm+n; i++ {
		s := fmt.Sprintf("%s-%s-%d", tag, b.run, i%sessions)
		dl, err := timeTurn(b.local, "loc-"+s, text)
		if err != nil {
			return nil, err
		}
		dd, err := timeTurn(b.dur, "dur-"+s, text)
		if err != nil {
			return nil, err
		}
		if i >= warm {
			p.local = append(p.local, dl)
			p.durable = append(p.durable, dd)
		}
		b.prog.Printf("%d/%d turns each", max(0, i+1-warm), n)
	}
	return p, nil
}

// 1. Turn overhead: one model call, no tools, zero model latency.
func (b *bench) overhead() error {
	p, err := b.pairTurns("ovh", "hi", b.f.n)
	if err != nil {
		return err
	}
	b.base = p
	added := p.durable.P50() - p.local.P50()
	label := sectionLabel("overhead")
	b.rows = append(b.rows,
		row{Figure: label, Variant: "in-process loop (localagent)", N: len(p.local), P50: p.local.P50(), P99: p.local.P99()},
		row{Figure: label, Variant: "durable, " + b.serverLabel(), N: len(p.durable), P50: p.durable.P50(), P99: p.durable.P99(),
			Result: fmt.Sprintf("%s p50 added (p99 %s)", lab.SignedMs(added), lab.SignedMs(p.durable.P99()-p.local.P99())),
			Goal:   "≤ 15 ms p50 added", Met: met(added <= 15*time.Millisecond),
			Values: map[string]float64{"addedP50Ms": lab.MsOf(added)}},
	)
	if b.f.untuned {
		return nil
	}
	b.prog.Logf("running the same figure on an untuned embedded server (child process)")
	r, err := b.untunedChild()
	if err != nil {
		b.rows = append(b.rows, row{Figure: label, Variant: "durable, embedded untuned", Result: "error: " + oneLine(err.Error(), 120)})
		return nil
	}
	for _, x := range r.Rows {
		if strings.HasPrefix(x.Variant, "durable") {
			x.Result += " (vs its own in-process run)"
			x.Goal, x.Met = "(stock config, for comparison)", ""
			b.rows = append(b.rows, x)
		}
	}
	return nil
}

// untunedChild runs the turn-overhead figure in a child process whose
// embedded server has the stock configuration.
func (b *bench) untunedChild() (*benchReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "bench", "-untuned", "-only", "overhead", "-json", "-n", fmt.Sprint(b.f.n))
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
func (b *bench) stepOverhead() error {
	if b.base == nil {
		b.prog.Logf("measuring the plain-turn baseline first")
		p, err := b.pairTurns("ovh", "hi", b.f.n)
		if err != nil {
			return err
		}
		b.base = p
	}
	k := b.f.steps
	p, err := b.pairTurns("stp", fmt.Sprintf("[steps=%d] count", k), b.f.n)
	if err != nil {
		return err
	}
	per := func(pick func(lab.Sample) time.Duration) time.Duration {
		turn := pick(b.base.durable) - pick(b.base.local)
		return (pick(p.durable) - pick(p.local) - turn) / time.Duration(k)
	}
	perP50, perP99 := per(lab.Sample.P50), per(lab.Sample.P99)
	label := sectionLabel("steps")
	b.rows = append(b.rows,
		row{Figure: label, Variant: fmt.Sprintf("in-process loop, %d tool steps", k), N: len(p.local), P50: p.local.P50(), P99: p.local.P99()},
		row{Figure: label, Variant: fmt.Sprintf("durable %s, %d tool steps", b.serverLabel(), k), N: len(p.durable), P50: p.durable.P50(), P99: p.durable.P99(),
			Result: fmt.Sprintf("%s per step p50 added, net of the turn overhead (p99 %s)", lab.SignedMs(perP50), lab.SignedMs(perP99)),
			Goal:   "≤ 10 ms p50 per step", Met: met(perP50 <= 10*time.Millisecond),
			Values: map[string]float64{"perStepP50Ms": lab.MsOf(perP50)}},
	)
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
		h, err := lab.ServeIngress(a)
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
		if err := add("durable, NATS feed (2 connections)", lab.Durable(b.c, sub, q)); err != nil {
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
	base := vs[0].s.P50()
	for i, v := range vs {
		r := row{Figure: label, Variant: v.name, N: len(v.s), P50: v.s.P50(), P99: v.s.P99()}
		if i > 0 {
			added := v.s.P50() - base
			r.Result = lab.SignedMs(added) + " p50 added"
			r.Goal, r.Met = "≤ 5 ms p50 added", met(added <= 5*time.Millisecond)
			r.Values = map[string]float64{"addedP50Ms": lab.MsOf(added)}
		}
		b.rows = append(b.rows, r)
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

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
