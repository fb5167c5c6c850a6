package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/transcript"
)

// BenchmarkModelStepReads is the store work of one model step in a
// session of turns turns (a user entry and a reply each): the reply's
// point read before the call, the branch read, the reply's append and its
// read back. go test ./internal/store -run '^$' -bench ModelStepReads
func BenchmarkModelStepReads(b *testing.B) {
	for _, turns := range []int{1, 10, 50} {
		for _, cached := range []bool{false, true} {
			b.Run(fmt.Sprintf("turns=%d/cache=%v", turns, cached), func(b *testing.B) {
				s, err := store.OpenSQLite(b.TempDir() + "/bench.db")
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if !cached {
					store.WithoutEntryCache(s)
				}
				ctx := context.Background()
				leaf := ""
				add := func(id, role, text string) {
					e := transcript.Entry{ID: id, ParentID: leaf, Type: transcript.TypeMessage, Time: time.Now().UTC(),
						Message: &transcript.Message{Role: role, Text: text}}
					if err := s.Append(ctx, "sess", e); err != nil {
						b.Fatal(err)
					}
					leaf = id
				}
				for i := range turns {
					add(fmt.Sprintf("u%d", i), transcript.RoleUser, "a question of a few words")
					add(fmt.Sprintf("a%d", i), transcript.RoleAssistant, "an answer of a few more words than the question had")
				}
				b.ResetTimer()
				for i := range b.N {
					add(fmt.Sprintf("bu%d", i), transcript.RoleUser, "next question")
					if _, err := s.Get(ctx, "sess", fmt.Sprintf("ba%d", i)); err == nil {
						b.Fatal("reply exists before the call")
					}
					if _, err := s.Branch(ctx, "sess", leaf); err != nil {
						b.Fatal(err)
					}
					add(fmt.Sprintf("ba%d", i), transcript.RoleAssistant, "next answer")
					if _, err := s.Get(ctx, "sess", leaf); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
