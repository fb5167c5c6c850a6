package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/admission"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/tools"
)

// loadFlags are the knobs of the load curve.
type loadFlags struct {
	rates     string
	duration  time.Duration
	pool      int
	toolFrac  float64
	first     time.Duration
	stream    time.Duration
	tokens    int
	shape     string
	workers   int
	out       string
	json      bool
	nats      string
	pg        string
	admit     int
	admitAge  time.Duration
	wfPollers int
	cpuProf   string
	warmup    time.Duration
	seed      uint64
	// store and feed swap one part of the production shape into the
	// embedded one (-shape embedded), to measure what each part costs.
	store, feed string
	// server is where the Temporal server runs: embedded in this process
	// or in a process of its own.
	server string
}

// loadTurn is one measured turn.
type loadTurn struct {
	session  int
	first    bool // the session's first turn (a new session)
	steps    int
	prompt   string
	start    time.Time
	wall     time.Duration
	tool     time.Duration
	model    time.Duration
	code     string // "" when completed
	accepted bool   // the ingress accepted it (not refused before streaming)
}

// loadPoint is the report of one offered load.
type loadPoint struct {
	Offered        float64            `json:"offeredTurnsPerSecond"`
	Arrived        int                `json:"arrived"`
	Skipped        int                `json:"skippedPoolBusy"`
	Completed      int                `json:"completed"`
	Achieved       float64            `json:"achievedTurnsPerSecond"`
	OverheadP50    time.Duration      `json:"overheadP50Ns"`
	OverheadP99    time.Duration      `json:"overheadP99Ns"`
	OverheadMax    time.Duration      `json:"overheadMaxNs"`
	NewFirstP50    time.Duration      `json:"newSessionFirstTurnOverheadP50Ns"`
	NewFirstP99    time.Duration      `json:"newSessionFirstTurnOverheadP99Ns"`
	NewFirstN      int                `json:"newSessionFirstTurns"`
	OtherP50       time.Duration      `json:"otherTurnsOverheadP50Ns"`
	OtherP99       time.Duration      `json:"otherTurnsOverheadP99Ns"`
	WallP50        time.Duration      `json:"wallP50Ns"`
	WallP99        time.Duration      `json:"wallP99Ns"`
	OverOneSecond  int                `json:"turnsOverheadOver1s"`
	CPUPerTurn     map[string]float64 `json:"cpuMsPerTurn"`
	RSS            map[string]int64   `json:"rssBytes"`
	RSSPerSession  map[string]float64 `json:"rssBytesPerActiveSession"`
	ActiveSessions int                `json:"activeSessions"`
	Errors         map[string]int     `json:"errorsByCode,omitempty"`
	Load           string             `json:"loadAverageAfter"`
	overhead       lab.Sample
	firsts         lab.Sample
}

type loadReport struct {
	Title   string      `json:"title"`
	Started time.Time   `json:"started"`
	Machine lab.Machine `json:"machine"`
	Flags   string      `json:"flags"`
	Shape   string      `json:"shape"`
	Points  []loadPoint `json:"points"`
	Dists   []lab.Dist  `json:"distributions"`
}

// loadStack is what the generator talks to: an ingress URL, the kit (model
// server) and the processes whose CPU and memory are measured.
type loadStack struct {
	url   string
	kit   *lab.Kit
	procs map[string]int // name → pid (0: this process)
	close []func()
}

func runLoad(args []string) error {
	var f loadFlags
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.StringVar(&f.rates, "rates", "4,8,16,24", "offered loads to measure, turns/s (Poisson arrivals)")
	fs.DurationVar(&f.duration, "duration", 30*time.Second, "arrivals per offered load")
	fs.IntVar(&f.pool, "pool", 100, "sessions the turns are drawn from (a turn goes to a random idle one)")
	fs.Float64Var(&f.toolFrac, "tools", 0.3, "fraction of turns with 1–3 tool steps")
	fs.DurationVar(&f.first, "first-token", 300*time.Millisecond, "scripted model: time to first token of every reply")
	fs.DurationVar(&f.stream, "stream", time.Second, "scripted model: time to stream a text reply")
	fs.IntVar(&f.tokens, "tokens", 50, "scripted model: tokens per text reply")
	fs.StringVar(&f.shape, "shape", "embedded", "embedded (one process: server, worker, ingress) or prod (worker processes, Postgres store, NATS feed)")
	fs.IntVar(&f.workers, "workers", 1, "worker processes with -shape prod")
	fs.StringVar(&f.server, "server", "", "the Temporal server: embedded (the dev server, a child of this process), or process (the same server started by a process of its own); default embedded with -shape embedded, process with -shape prod")
	fs.StringVar(&f.store, "store", "sqlite", "with -shape embedded: the session store, sqlite or postgres (a throwaway database), to measure one part of the prod shape alone")
	fs.StringVar(&f.feed, "feed", "inprocess", "with -shape embedded: the live feed, inprocess or nats, to measure one part of the prod shape alone")
	fs.StringVar(&f.out, "out", "bench-out", "directory for load.json and load.svg (empty: write nothing)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of the table")
	fs.StringVar(&f.nats, "nats", envOr("FASTAGENT_LAB_NATS", "nats://127.0.0.1:4222"), "NATS URL (-shape prod)")
	fs.StringVar(&f.pg, "postgres", envOr("FASTAGENT_LAB_POSTGRES", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "Postgres server for a throwaway store database (-shape prod)")
	fs.IntVar(&f.admit, "admit", 0, "admission control: in-flight turns the ingress accepts before answering 429 (0: off)")
	fs.DurationVar(&f.admitAge, "admit-age", 0, "admission control: task-queue backlog age past which the ingress answers 429 (0: off)")
	fs.IntVar(&f.wfPollers, "wf-pollers", 0, "workflow task pollers of the in-process worker (-shape embedded): 0 autoscaled (the default), n ≥ 2 fixed in the SDK's mixed mode (2 was the default before)")
	fs.DurationVar(&f.warmup, "warmup", 10*time.Second, "unmeasured turns at the first offered load before measuring (server, caches and pollers warm up)")
	fs.StringVar(&f.cpuProf, "cpuprofile", "", "write a CPU profile of this process over the measured points to this file (go tool pprof -top)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the arrival and session draws")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rates, err := parseRates(f.rates)
	if err != nil {
		return err
	}
	if f.pool <= 0 || f.duration <= 0 || f.toolFrac < 0 || f.toolFrac > 1 {
		return errors.New("load: -pool and -duration must be positive and -tools within 0..1")
	}
	if (f.store != "sqlite" && f.store != "postgres") || (f.feed != "inprocess" && f.feed != "nats") {
		return fmt.Errorf("load: -store is sqlite or postgres and -feed inprocess or nats (got %q, %q)", f.store, f.feed)
	}
	if f.server == "" {
		f.server = "embedded"
		if f.shape == "prod" {
			f.server = "process"
		}
	}
	if f.server != "embedded" && f.server != "process" {
		return fmt.Errorf("load: -server is embedded or process (got %q)", f.server)
	}
	if f.shape != "embedded" && (f.store != "sqlite" || f.feed != "inprocess") {
		return errors.New("load: -store and -feed change the embedded shape; -shape prod always uses Postgres and NATS")
	}
	if f.wfPollers == 1 || f.wfPollers < 0 {
		return errors.New("load: -wf-pollers must be 0 (default) or at least 2 (pollers alternate between the sticky and the shared queue)")
	}
	prog := &lab.Progress{W: os.Stderr, Total: len(rates) + 1}
	prog.Step(1, "setting up the "+f.shape+" stack")
	var st *loadStack
	switch f.shape {
	case "embedded":
		st, err = embeddedLoadStack(f)
	case "prod":
		st, err = prodLoadStack(f, prog)
	default:
		return fmt.Errorf("load: unknown -shape %q (embedded or prod)", f.shape)
	}
	if err != nil {
		return err
	}
	defer st.shutdown()

	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
	g := &generator{f: f, st: st, run: run, rng: rand.New(rand.NewPCG(f.seed, 16)), used: make([]bool, f.pool)}
	g.idle = make([]int, f.pool)
	for i := range g.idle {
		g.idle[i] = i
	}
	report := loadReport{Title: "fastagent load", Started: time.Now().UTC(), Machine: lab.MachineFacts(), Flags: strings.Join(args, " "), Shape: f.shapeName()}
	if f.warmup > 0 {
		prog.Logf("warming up: %g turns/s for %s, not measured", rates[0], f.warmup)
		g.offer(rates[0], f.warmup, prog)
	}
	baseRSS := g.rss()
	if f.cpuProf != "" {
		pf, err := os.Create(f.cpuProf)
		if err != nil {
			return fmt.Errorf("load: -cpuprofile: %w", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return fmt.Errorf("load: -cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	for i, rate := range rates {
		prog.Step(i+2, fmt.Sprintf("%g turns/s offered for %s", rate, f.duration))
		p := g.point(rate, prog, baseRSS)
		report.Points = append(report.Points, p)
		report.Dists = append(report.Dists,
			lab.Dist{Figure: "overhead", Variant: fmt.Sprintf("%g turns/s offered, all turns", rate), Sample: p.overhead},
			lab.Dist{Figure: "overhead", Variant: fmt.Sprintf("%g turns/s offered, new sessions' first turns", rate), Sample: p.firsts})
	}
	if f.out != "" {
		if err := writeLoadOut(f.out, report); err != nil {
			return err
		}
		prog.Logf("wrote %s and %s", filepath.Join(f.out, "load.json"), filepath.Join(f.out, "load.svg"))
	}
	if f.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	printLoad(os.Stdout, report)
	return nil
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, x := range strings.Split(s, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil || r <= 0 || math.IsInf(r, 0) {
			return nil, fmt.Errorf("load: -rates: %q is not a positive number of turns/s", x)
		}
		out = append(out, r)
	}
	return out, nil
}

// loadModel is the scripted model both shapes use; tool steps read a small
// file with the built-in read tool (present in worker processes too).
func loadModel(f loadFlags) lab.LoadModel {
	return lab.LoadModel{First: f.first, Stream: f.stream, Tokens: f.tokens, Tool: tools.NameRead, Args: `{"path":"load.txt"}`}
}

func newLoadKit(f loadFlags) (*lab.Kit, error) {
	kit, err := lab.NewKit()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(kit.Dir, "load.txt"), []byte("a small file the load curve's tool steps read\n"), 0o644); err != nil {
		kit.Close()
		return nil, err
	}
	kit.Model.Handle(loadModel(f).Handler())
	return kit, nil
}

// embeddedLoadStack is `fastagent dev`'s shape: embedded server, worker
// and ingress in this process, SQLite store, in-process feed.
func embeddedLoadStack(f loadFlags) (*loadStack, error) {
	st := &loadStack{procs: map[string]int{}}
	srv, err := st.startServer(f, "worker+ingress+generator")
	if err != nil {
		return nil, err
	}
	c, err := srv.Dial(context.Background())
	if err != nil {
		st.shutdown()
		return nil, err
	}
	st.close = append(st.close, c.Close)
	if st.kit, err = newLoadKit(f); err != nil {
		st.shutdown()
		return nil, err
	}
	st.close = append(st.close, st.kit.Close)
	q := lab.NewQueue("load")
	rt, err := st.embeddedRuntime(f, q, srv.Namespace())
	if err != nil {
		st.shutdown()
		return nil, err
	}
	w, err := rt.StartWorker(context.Background(), c)
	if err != nil {
		st.shutdown()
		return nil, err
	}
	st.close = append(st.close, w.Stop)
	return st, st.serve(c, rt)
}

// startServer starts the Temporal server (-server) and names this
// process's part (here: what runs in this process beside an embedded
// server) in the CPU and RSS columns.
func (st *loadStack) startServer(f loadFlags, here string) (lab.Temporal, error) {
	if f.server == "embedded" {
		st.procs["this process (server+"+here+")"] = 0
		srv, err := lab.StartServer(lab.ServerOptions{})
		if err != nil {
			return nil, err
		}
		st.close = append(st.close, srv.Close)
		return srv, nil
	}
	st.procs["this process ("+here+")"] = 0
	bin, err := os.Executable()
	if err != nil {
		return nil, err
	}
	srv, err := lab.StartServerProcess(bin)
	if err != nil {
		return nil, err
	}
	st.close = append(st.close, srv.Close)
	st.procs["temporal server process"] = srv.Pid()
	return srv, nil
}

// shapeName names the measured shape: prod, embedded, or embedded with the
// prod shape's store or feed swapped in.
func (f loadFlags) shapeName() string {
	name := f.shape
	if f.server == "process" {
		name += ", server in its own process"
	}
	if f.store != "sqlite" {
		name += ", " + f.store + " store"
	}
	if f.feed != "inprocess" {
		name += ", " + f.feed + " feed"
	}
	return name
}

// embeddedRuntime assembles the embedded shape's runtime on queue: the
// kit's SQLite store and an in-process feed, or (-store, -feed) a throwaway
// Postgres database and NATS, as the prod shape's worker uses them.
func (st *loadStack) embeddedRuntime(f loadFlags, q, namespace string) (*serve.Parts, error) {
	var bus feed.Bus = feed.NewInProcess()
	if f.feed == "nats" {
		if err := lab.NATSReachable(f.nats); err != nil {
			return nil, fmt.Errorf("-feed nats needs NATS at %s: %w", f.nats, err)
		}
		var err error
		if bus, err = feed.NewNATS(f.nats, feed.WithName("fastagent-lab-load")); err != nil {
			return nil, err
		}
	}
	st.close = append(st.close, func() { _ = bus.Close() })
	if f.store == "sqlite" {
		return st.kit.Runtime(bus, q, f.tune(namespace))
	}
	dsn, drop, err := throwawayDatabase(f.pg)
	if err != nil {
		return nil, err
	}
	st.close = append(st.close, drop)
	cfg := serve.Config{Dir: st.kit.Dir, TaskQueue: q, Store: dsn, Logger: lab.QuietLogger()}
	with := serve.Components{Feed: bus, Loader: st.kit.Loader, Models: st.kit.Models}
	f.tune(namespace)(&cfg, &with)
	rt, err := serve.Assemble(context.Background(), cfg, with)
	if err != nil {
		return nil, err
	}
	st.close = append(st.close, rt.Close)
	return rt, nil
}

// tune is the runtime Config and Components of the load flags: the
// worker's pollers and the ingress's admission control (when a limit is
// set).
func (f loadFlags) tune(namespace string) func(*serve.Config, *serve.Components) {
	return func(c *serve.Config, w *serve.Components) {
		w.WorkflowTaskPollers = f.wfPollers
		c.Admission = admission.Limits{MaxInFlight: f.admit, MaxBacklogAge: f.admitAge}
		c.Namespace = namespace
	}
}

// serve starts rt's ingress in this process.
func (st *loadStack) serve(c client.Client, rt *serve.Parts) error {
	h, err := lab.ServeIngress(rt, rt.Agent(c))
	if err != nil {
		st.shutdown()
		return err
	}
	st.close = append(st.close, h.Close)
	st.url = h.URL
	return nil
}

// prodLoadStack is the production shape on one machine: worker processes
// (the fastagent build) on a Postgres store, the ingress in this process
// reading the NATS feed; the Temporal dev server is this process's child.
func prodLoadStack(f loadFlags, prog *lab.Progress) (*loadStack, error) {
	if err := lab.NATSReachable(f.nats); err != nil {
		return nil, fmt.Errorf("-shape prod needs NATS at %s: %w", f.nats, err)
	}
	st := &loadStack{procs: map[string]int{}}
	dsn, drop, err := throwawayDatabase(f.pg)
	if err != nil {
		return nil, err
	}
	st.close = append(st.close, drop)
	bins := &lab.Binaries{}
	st.close = append(st.close, bins.Close)
	prog.Logf("building the fastagent binary")
	bin, err := bins.Worker()
	if err != nil {
		st.shutdown()
		return nil, err
	}
	srv, err := st.startServer(f, "ingress+generator")
	if err != nil {
		st.shutdown()
		return nil, err
	}
	c, err := srv.Dial(context.Background())
	if err != nil {
		st.shutdown()
		return nil, err
	}
	st.close = append(st.close, c.Close)
	if st.kit, err = newLoadKit(f); err != nil {
		st.shutdown()
		return nil, err
	}
	st.close = append(st.close, st.kit.Close)
	q := lab.NewQueue("load")
	spec := lab.WorkerSpec{Bin: bin, Kit: st.kit, TemporalAddress: srv.FrontendAddress(), TemporalAPIKey: srv.APIKey(), Namespace: srv.Namespace(), TaskQueue: q, Feed: f.nats, Store: dsn}
	for i := range max(1, f.workers) {
		p, err := lab.StartWorkerProc(spec)
		if err != nil {
			st.shutdown()
			return nil, err
		}
		st.close = append(st.close, func() { p.Stop(5 * time.Second) })
		st.procs[fmt.Sprintf("worker process %d", i+1)] = p.Pid()
	}
	bus, err := feed.NewNATS(f.nats, feed.WithName("fastagent-lab-load-ingress"))
	if err != nil {
		st.shutdown()
		return nil, err
	}
	st.close = append(st.close, func() { _ = bus.Close() })
	// The ingress reads the workers' Postgres store (not the kit's SQLite).
	cfg := serve.Config{Dir: st.kit.Dir, TaskQueue: q, Store: dsn, Logger: lab.QuietLogger()}
	with := serve.Components{Feed: bus, Loader: st.kit.Loader, Models: st.kit.Models}
	f.tune(srv.Namespace())(&cfg, &with)
	rt, err := serve.Assemble(context.Background(), cfg, with)
	if err != nil {
		st.shutdown()
		return nil, err
	}
	st.close = append(st.close, rt.Close)
	return st, st.serve(c, rt)
}

// throwawayDatabase creates a database on the Postgres server at admin and
// returns its DSN and a function that drops it.
func throwawayDatabase(admin string) (string, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("-shape prod needs Postgres at %s: %w", admin, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	name := fmt.Sprintf("fastagent_load_%x", time.Now().UnixNano()&0xffffffffff)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, fmt.Errorf("parse %s: %w", admin, err)
	}
	u.Path = "/" + name
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, admin); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = conn.Close(ctx)
		}
	}
	return u.String(), drop, nil
}

func (st *loadStack) shutdown() {
	for i := len(st.close) - 1; i >= 0; i-- {
		st.close[i]()
	}
	st.close = nil
}

// generator sends turns at Poisson arrival times to random idle sessions of
// the pool.
type generator struct {
	f   loadFlags
	st  *loadStack
	run string
	rng *rand.Rand

	mu   sync.Mutex
	idle []int  // sessions not in a turn
	used []bool // sessions that had a turn (they exist)
	seq  int
}

func (g *generator) sessionName(i int) string { return fmt.Sprintf("load-%s-%05d", g.run, i) }

// take draws a random idle session; false when every session is in a turn.
func (g *generator) take() (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.idle) == 0 {
		return 0, false
	}
	j := g.rng.IntN(len(g.idle))
	s := g.idle[j]
	g.idle[j] = g.idle[len(g.idle)-1]
	g.idle = g.idle[:len(g.idle)-1]
	return s, true
}

func (g *generator) release(s int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.idle = append(g.idle, s)
}

func (g *generator) active() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, u := range g.used {
		if u {
			n++
		}
	}
	return n
}

func (g *generator) cpu() map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range g.st.procs {
		if d, err := lab.CPUTime(pid); err == nil {
			out[name] = d
		}
	}
	return out
}

func (g *generator) rss() map[string]int64 {
	out := map[string]int64{}
	for name, pid := range g.st.procs {
		if pid == 0 {
			pid = os.Getpid()
		}
		if n, err := lab.RSSOf(pid); err == nil {
			out[name] = n
		}
	}
	return out
}

// point offers rate turns/s for the duration, waits for every turn to end
// and summarises.
func (g *generator) point(rate float64, prog *lab.Progress, baseRSS map[string]int64) loadPoint {
	p := loadPoint{Offered: rate, Errors: map[string]int{}}
	cpu0 := g.cpu()
	start := time.Now()
	out := g.offer(rate, g.f.duration, prog)
	turns := out.turns
	p.Arrived, p.Skipped = out.arrived, out.skipped
	elapsed := time.Since(start)
	cpu1 := g.cpu()
	rss := g.rss()
	p.Load = lab.LoadAverage()

	model := lab.ModelTime(g.st.kit.Model.Requests())
	var all, firsts, others, walls lab.Sample
	for _, t := range turns {
		if t.code != "" {
			p.Errors[t.code]++
			continue
		}
		p.Completed++
		t.model = model[t.prompt]
		o := max(0, t.wall-t.model-t.tool)
		all = append(all, o)
		walls = append(walls, t.wall)
		if o > time.Second {
			p.OverOneSecond++
		}
		if t.first {
			firsts = append(firsts, o)
		} else {
			others = append(others, o)
		}
	}
	p.Achieved = float64(p.Completed) / elapsed.Seconds()
	p.OverheadP50, p.OverheadP99, p.OverheadMax = all.P50(), all.P99(), all.Percentile(100)
	p.NewFirstP50, p.NewFirstP99, p.NewFirstN = firsts.P50(), firsts.P99(), len(firsts)
	p.OtherP50, p.OtherP99 = others.P50(), others.P99()
	p.WallP50, p.WallP99 = walls.P50(), walls.P99()
	p.overhead, p.firsts = all, firsts
	p.CPUPerTurn = map[string]float64{}
	for name, d := range cpu1 {
		if p.Completed > 0 {
			p.CPUPerTurn[name] = lab.MsOf(d-cpu0[name]) / float64(p.Completed)
		}
	}
	p.ActiveSessions = g.active()
	p.RSS, p.RSSPerSession = rss, map[string]float64{}
	for name, n := range rss {
		if p.ActiveSessions > 0 {
			p.RSSPerSession[name] = float64(n-baseRSS[name]) / float64(p.ActiveSessions)
		}
	}
	return p
}

// sent are the turns of one run of arrivals.
type sent struct {
	turns            []*loadTurn
	arrived, skipped int
}

// offer offers rate turns/s for d and waits for every turn to end.
func (g *generator) offer(rate float64, d time.Duration, prog *lab.Progress) sent {
	var (
		out   sent
		mu    sync.Mutex
		turns []*loadTurn
		wg    sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	next := start
	for {
		next = next.Add(time.Duration(g.rng.ExpFloat64() / rate * float64(time.Second)))
		if next.After(end) {
			break
		}
		time.Sleep(time.Until(next))
		out.arrived++
		s, ok := g.take()
		if !ok {
			out.skipped++
			continue
		}
		g.mu.Lock()
		g.seq++
		t := &loadTurn{session: s, first: !g.used[s], start: time.Now()}
		g.used[s] = true
		if g.rng.Float64() < g.f.toolFrac {
			t.steps = 1 + g.rng.IntN(3)
		}
		t.prompt = fmt.Sprintf("load-%s-%d", g.run, g.seq)
		if t.steps > 0 {
			t.prompt += fmt.Sprintf(" [steps=%d]", t.steps)
		}
		g.mu.Unlock()
		mu.Lock()
		turns = append(turns, t)
		n := len(turns)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.release(t.session)
			g.turn(t)
		}()
		prog.Printf("%d turns sent", n)
	}
	prog.Logf("%d turns sent; waiting for the last ones", len(turns))
	wg.Wait()
	out.turns = turns
	return out
}

// turn sends one turn over HTTP and times it: wall from the request to the
// terminal event, tool time from each tool_started to its tool_ended.
func (g *generator) turn(t *loadTurn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	started := map[string]time.Time{}
	rs, err := lab.InvokeHTTP(ctx, g.st.url, g.sessionName(t.session), t.prompt, "", func(r lab.Received) {
		switch r.Type {
		case agent.TypeToolStarted:
			started[r.ID] = r.At
		case agent.TypeToolEnded:
			if at, ok := started[r.ID]; ok {
				t.tool += r.At.Sub(at)
			}
		}
	})
	t.wall = time.Since(t.start)
	var se *lab.StatusError
	switch {
	case errors.As(err, &se):
		t.code = fmt.Sprintf("http %d", se.Status)
		if se.RetryAfter != "" {
			t.code += " (Retry-After)"
		}
		return
	case err != nil && len(rs) == 0:
		t.code = "transport: " + lab.OneLine(err.Error(), 60)
		return
	}
	t.accepted = true
	term, _, ok := lab.Terminal(lab.Events(rs))
	switch {
	case !ok:
		t.code = "no terminal"
	case term.Type != agent.TypeCompleted:
		t.code = "failed " + term.Code
	}
}

func writeLoadOut(dir string, r loadReport) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("load output: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("load output: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "load.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("load output: %w", err)
	}
	var svg bytes.Buffer
	title := fmt.Sprintf("%s (%s) — orchestration overhead vs offered load — %s", r.Title, r.Shape, r.Machine)
	if err := lab.WriteSVG(&svg, title, r.Dists); err != nil {
		return fmt.Errorf("load chart: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "load.svg"), svg.Bytes(), 0o644); err != nil {
		return fmt.Errorf("load chart: %w", err)
	}
	return nil
}

func printLoad(w io.Writer, r loadReport) {
	fmt.Fprintf(w, "%s (%s) — %s\n", r.Title, r.Shape, r.Started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "machine: %s\n", r.Machine)
	if r.Flags != "" {
		fmt.Fprintf(w, "flags: %s\n", r.Flags)
	}
	fmt.Fprintln(w, "overhead = turn wall time at the HTTP client − model server time − tool time (tool_started→tool_ended);")
	fmt.Fprintln(w, "achieved = completed turns / (last completion − first arrival), so it includes draining the last turns")
	fmt.Fprintln(w)
	t := lab.Table{Header: []string{"offered/s", "achieved/s", "turns", "overhead p50", "p99", "max", ">1 s",
		"new 1st p50", "p99 (n)", "others p50", "p99", "wall p50", "p99", "CPU ms/turn", "RSS", "RSS/session", "errors", "load avg"}}
	for _, p := range r.Points {
		var cpu, rss, per []string
		for _, name := range slices.Sorted(maps.Keys(p.CPUPerTurn)) {
			cpu = append(cpu, fmt.Sprintf("%.1f", p.CPUPerTurn[name]))
			rss = append(rss, lab.Bytes(p.RSS[name]))
			per = append(per, lab.Bytes(int64(p.RSSPerSession[name])))
		}
		var errs []string
		for _, code := range slices.Sorted(maps.Keys(p.Errors)) {
			errs = append(errs, fmt.Sprintf("%s: %d", code, p.Errors[code]))
		}
		if p.Skipped > 0 {
			errs = append(errs, fmt.Sprintf("pool busy: %d", p.Skipped))
		}
		t.Add(fmt.Sprintf("%g", p.Offered), fmt.Sprintf("%.1f", p.Achieved), fmt.Sprint(p.Completed),
			lab.Ms(p.OverheadP50), lab.Ms(p.OverheadP99), lab.Ms(p.OverheadMax), fmt.Sprint(p.OverOneSecond),
			lab.Ms(p.NewFirstP50), fmt.Sprintf("%s (%d)", lab.Ms(p.NewFirstP99), p.NewFirstN), lab.Ms(p.OtherP50), lab.Ms(p.OtherP99),
			lab.Ms(p.WallP50), lab.Ms(p.WallP99),
			strings.Join(cpu, " + "), strings.Join(rss, " + "), strings.Join(per, " + "), strings.Join(errs, ", "), p.Load)
	}
	t.Fprint(w)
	if len(r.Points) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "CPU and RSS columns, in order:", strings.Join(slices.Sorted(maps.Keys(r.Points[0].CPUPerTurn)), " + "))
	}
}
