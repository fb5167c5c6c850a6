package sandbox_test

import (
	"context"
	"testing"

	"github.com/fastagent/fastagent/internal/sandbox"
)

// BenchmarkStart measures one call of /bin/true per mechanism: what the
// sandbox adds per tool process, against the unconfined run. landlock-abi5
// is Landlock mode as on a kernel without signal scoping, where the helper
// supervises the call's signals.
func BenchmarkStart(b *testing.B) {
	type setup struct {
		name string
		mode sandbox.Mode
		abi  int
	}
	for _, s := range []setup{{"off", sandbox.Off, 0}, {"namespaces", sandbox.Namespaces, 0}, {"landlock", sandbox.Landlock, 0}, {"landlock-abi5", sandbox.Landlock, 5}} {
		m := s.mode
		b.Run(s.name, func(b *testing.B) {
			bx := sandbox.Open(sandbox.WithLandlockABI(sandbox.Config{Mode: m}, s.abi))
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
