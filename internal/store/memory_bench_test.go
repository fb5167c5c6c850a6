package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/store"
)

// memoryWords is the vocabulary of the benchmark's memories.
var memoryWords = strings.Fields(`deploy friday colour teal coffee meeting budget review release kubernetes
postgres backup invoice customer renewal contract holiday office laptop password-free onboarding
roadmap quarter hiring interview travel visa conference keynote schedule oncall incident pager latency
database migration feature flag rollout canary staging production monitor dashboard alert threshold`)

// BenchmarkMemoryRecall measures one recall (4 query words, limit 5) of a
// principal among memoriesPerPrincipal×principals memories of one agent,
// on both drivers. Run: go test ./internal/store -run '^$' -bench MemoryRecall -benchtime 2000x
func BenchmarkMemoryRecall(b *testing.B) {
	const principals, perPrincipal = 20, 500
	drivers := []struct {
		name string
		open func(testing.TB) store.Store
	}{
		{"sqlite", func(tb testing.TB) store.Store { return openTempSQLite(tb) }},
		{"postgres", func(tb testing.TB) store.Store { return openTempPostgres(tb) }},
	}
	for _, d := range drivers {
		b.Run(d.name, func(b *testing.B) {
			s := d.open(b)
			b.Cleanup(func() { _ = s.Close() })
			ctx := context.Background()
			r := rand.New(rand.NewPCG(1, 2))
			sentence := func(n int) string {
				w := make([]string, n)
				for i := range w {
					w[i] = memoryWords[r.IntN(len(memoryWords))]
				}
				return strings.Join(w, " ")
			}
			start := time.Now()
			for p := range principals {
				for i := range perPrincipal {
					m := store.Memory{Agent: "bench", Owner: fmt.Sprintf("p%d", p), Text: sentence(12), Session: "s"}
					if _, err := s.Remember(ctx, m, fmt.Sprintf("%d/%d", p, i)); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.Logf("%s: stored %d memories in %s", d.name, principals*perPrincipal, time.Since(start).Round(time.Millisecond))
			queries := make([]string, 64)
			for i := range queries {
				queries[i] = sentence(4)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				q := store.MemoryQuery{MemoryScope: store.MemoryScope{Agent: "bench", Owners: []string{fmt.Sprintf("p%d", i%principals), ""}},
					Text: queries[i%len(queries)], Limit: 5}
				ms, err := s.Recall(ctx, q)
				if err != nil {
					b.Fatal(err)
				}
				if len(ms) == 0 {
					b.Fatalf("recall %q found nothing", q.Text)
				}
			}
		})
	}
}
