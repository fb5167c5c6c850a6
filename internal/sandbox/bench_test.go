package sandbox_test

import (
	"context"
	"testing"

	"github.com/fastagent/fastagent/internal/sandbox"
)

// BenchmarkStart measures one call of /bin/true per mechanism: what the
// sandbox adds per tool process, against the unconfined run.
func BenchmarkStart(b *testing.B) {
	for _, m := range []sandbox.Mode{sandbox.Off, sandbox.Namespaces, sandbox.Landlock} {
		b.Run(string(m), func(b *testing.B) {
			t := &testing.T{}
			_ = t
			bx := sandbox.Open(sandbox.Config{Mode: m})
			defer bx.Close()
			if bx.Status().Mode != m {
				b.Skip(bx.Status().Error)
			}
			ws := b.TempDir()
			for b.Loop() {
				p, err := bx.Start(context.Background(), &sandbox.Cmd{Path: "/bin/true", Dir: ws, Writable: []string{ws}})
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
