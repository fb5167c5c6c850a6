package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
)

// idleHeap measures what an idle session holds in a worker's memory, in
// this process: a worker of its own on a queue of its own, N sessions that
// had one turn each, and the live heap, goroutine stacks and goroutines
// after four forced garbage collections, before and after, per session.
// Unlike the RSS figure (idle) it has no collector headroom and no
// allocator slack in it: it is what a cached session keeps alive. With
// -idle-heapprofile the heap profile taken after the sessions (inuse_space)
// is written there (go tool pprof -sample_index=inuse_space -top).
func (b *bench) idleHeap() error {
	bus := feed.NewInProcess()
	defer bus.Close()
	queue := lab.NewQueue("idleheap")
	w, err := lab.StartWorker(b.c, b.kit, bus, queue)
	if err != nil {
		return err
	}
	defer w.Stop()
	a, err := lab.Durable(b.c, b.kit, bus, queue)
	if err != nil {
		return err
	}
	a.Grace = time.Millisecond
	if _, err := timeTurn(a, "idleheap-warm-"+b.run, "hi"); err != nil {
		return err
	}
	N := b.f.idle
	if N < 2 {
		return fmt.Errorf("-idle %d: need at least 2 sessions", N)
	}
	// Allocations are sampled finely from here on, so that what the test
	// harness in this process keeps (the scripted model server's request
	// log, the in-process feed's retained messages; a worker has neither)
	// can be told apart from what the worker keeps.
	prevRate := runtime.MemProfileRate
	runtime.MemProfileRate = 4096
	defer func() { runtime.MemProfileRate = prevRate }()
	before := heapNow()
	harness0 := harnessBytes()
	name := func(i int) string { return fmt.Sprintf("idleheap-%s-%05d", b.run, i) }
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
	settleGoroutines(before.goroutines+N, 30*time.Second)
	after := heapNow()
	harness := (harnessBytes() - harness0) / float64(N)
	if b.f.idleHeapProf != "" {
		f, err := os.Create(b.f.idleHeapProf)
		if err != nil {
			return err
		}
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	n := float64(N)
	heap := float64(int64(after.heap)-int64(before.heap))/n - harness
	stacks := float64(int64(after.stacks)-int64(before.stacks)) / n
	gs := float64(after.goroutines-before.goroutines) / n
	b.rows = append(b.rows, row{
		Figure: sectionLabel("idleheap"), Variant: "in-process worker, after GC",
		Result: fmt.Sprintf("%s/session: live heap %s + goroutine stacks %s; %.2f goroutines/session (%d sessions; the test harness's %s/session not counted)",
			lab.Bytes(int64(heap+stacks)), lab.Bytes(int64(heap)), lab.Bytes(int64(stacks)), gs, N, lab.Bytes(int64(harness))),
		Goal: "≤ 32 KiB", Met: met(heap+stacks <= 32<<10),
		Values: map[string]float64{"harnessPerSession": harness, "heapPerSession": heap, "stacksPerSession": stacks, "goroutinesPerSession": gs, "bytesPerSession": heap + stacks},
	})
	return nil
}

type heapFacts struct {
	heap, stacks uint64
	goroutines   int
}

// heapNow collects garbage four times and reads the live heap and stacks.
// Each collection halves a parked goroutine's stack while it uses under a
// quarter of it, so four reach what an idle worker's stacks settle at
// within minutes (the runtime collects at least every two minutes).
func heapNow() heapFacts {
	for range 4 {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return heapFacts{heap: m.HeapAlloc, stacks: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

// harnessBytes estimates, from the heap profile as of the last collection,
// the live bytes the test harness holds: allocations made by the scripted
// model server or the in-process feed, scaled for sampling as pprof does.
func harnessBytes() float64 {
	n, _ := runtime.MemProfile(nil, true)
	recs := make([]runtime.MemProfileRecord, n+256)
	n, ok := runtime.MemProfile(recs, true)
	if !ok {
		return 0
	}
	rate := float64(runtime.MemProfileRate)
	total := 0.0
	for _, r := range recs[:n] {
		bytes, objs := r.InUseBytes(), r.InUseObjects()
		if bytes <= 0 || objs <= 0 || !harnessStack(r.Stack()) {
			continue
		}
		avg := float64(bytes) / float64(objs)
		total += float64(bytes) / (1 - math.Exp(-avg/rate))
	}
	return total
}

func harnessStack(pcs []uintptr) bool {
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "/testsupport/modelserver.") || strings.Contains(f.Function, "/internal/feed.(*InProcess)") {
			return true
		}
		if !more {
			return false
		}
	}
}

// settleGoroutines waits until the process runs at most want goroutines
// (one per idle session), or until the count has not fallen for two
// seconds, or for at most limit: the last turns' workflow tasks and update
// handlers may still be finishing when their callers have their answers.
func settleGoroutines(want int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	last, since := runtime.NumGoroutine(), time.Now()
	for time.Now().Before(deadline) && last > want && time.Since(since) < 2*time.Second {
		time.Sleep(100 * time.Millisecond)
		if n := runtime.NumGoroutine(); n < last {
			last, since = n, time.Now()
		}
	}
}
