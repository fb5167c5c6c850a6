package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/lab/chaosreport"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// loadWithKill runs many sessions at once against two worker processes and
// SIGKILLs one of them (then starts a replacement) part-way through.
func (ch *chaos) loadWithKill() error {
	e, err := ch.newProcEnv("retry:\n  heartbeat: 3s\n", 2)
	if err != nil {
		return err
	}
	defer e.close()
	e.kit.Model.Handle(func(r modelserver.Request) modelserver.Reply {
		return modelserver.Reply{Text: []string{"ok ", r.LastUserText()}, ChunkDelay: 20 * time.Millisecond}
	})
	S, T := ch.f.concurrent, ch.f.turns
	total := S * T
	killAt := int64(float64(total) * ch.f.killAt)
	prefix := "load-" + ch.run
	name := func(s int) string { return fmt.Sprintf("%s-%03d", prefix, s) }
	prompt := func(s, t int) string { return fmt.Sprintf("%s-s%03d-t%d", prefix, s, t) }

	var done, oneTerm, completed, lost, dup atomic.Int64
	var firstFail atomic.Value
	killed := make(chan string, 1)
	var killOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for s := 0; s < S; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := 0; t < T; t++ {
				r := e.invoke(name(s), prompt(s, t), "", nil)
				switch {
				case r.n == 0:
					lost.Add(1)
				case r.n > 1:
					dup.Add(int64(r.n - 1))
				}
				if r.ok {
					oneTerm.Add(1)
				}
				if r.ok && r.term.Type == agent.TypeCompleted {
					completed.Add(1)
				} else {
					firstFail.CompareAndSwap(nil, fmt.Sprintf("%s: %v %s", name(s), r.err, lab.OneLine(lab.Describe(r.evs), 120)))
				}
				if n := done.Add(1); n >= killAt {
					killOnce.Do(func() {
						go func() {
							e.mu.Lock()
							pid := e.workers[0].Pid()
							e.mu.Unlock()
							t0 := time.Now()
							_, err := e.replace(0)
							msg := fmt.Sprintf("worker %d SIGKILLed at %d/%d turns, replacement polling after %s", pid, n, total, time.Since(t0).Round(100*time.Millisecond))
							if err != nil {
								msg += " (replacement failed: " + err.Error() + ")"
							}
							ch.prog.Logf("%s", msg)
							killed <- msg
						}()
					})
				}
			}
		}()
	}
	stop := make(chan struct{})
	go func() {
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				ch.prog.Logf("%d/%d turns…", done.Load(), total)
			}
		}
	}()
	wg.Wait()
	close(stop)
	elapsed := time.Since(start)
	killNote := "no kill happened"
	select {
	case killNote = <-killed:
	case <-time.After(time.Minute):
	}

	ch.prog.Logf("checking the session store")
	ctx := context.Background()
	var problems []string
	for s := 0; s < S; s++ {
		prompts := make([]string, T)
		for t := range prompts {
			prompts[t] = prompt(s, t)
		}
		tr := lab.CheckTranscript(ctx, e.kit.Store, name(s), prompts, true)
		lost.Add(int64(tr.Missing))
		dup.Add(int64(tr.Duplicates))
		if len(problems) < 3 {
			for _, p := range tr.Problems {
				problems = append(problems, name(s)+": "+p)
			}
		}
	}
	calls := 0
	for _, r := range e.kit.Model.Requests() {
		if strings.HasPrefix(r.LastUserText(), prefix+"-") {
			calls++
		}
	}
	notes := []string{killNote, fmt.Sprintf("%s, %d model calls for %d turns", elapsed.Round(100*time.Millisecond), calls, total)}
	if v := firstFail.Load(); v != nil {
		notes = append(notes, "first failure: "+v.(string))
	}
	notes = append(notes, problems...)
	ch.rows = append(ch.rows, chaosreport.Row{
		Scenario:    fmt.Sprintf("%d sessions × %d turns, 1 of 2 worker processes SIGKILLed + restarted", S, T),
		Trials:      total,
		OneTerminal: int(oneTerm.Load()),
		AsSpecified: int(completed.Load()),
		Duplicates:  int(dup.Load()),
		Lost:        int(lost.Load()),
		Notes:       lab.OneLine(strings.Join(notes, "; "), 400),
	})
	return nil
}
