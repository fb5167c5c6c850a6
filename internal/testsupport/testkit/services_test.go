package testkit

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// outcomeTB records what a test helper did to its test; FailNow and SkipNow
// end the calling goroutine as the testing package does.
type outcomeTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (o *outcomeTB) Helper() {}
func (o *outcomeTB) Fatalf(format string, args ...any) {
	o.failed, o.msg = true, format
	runtime.Goexit()
}
func (o *outcomeTB) Skipf(format string, args ...any) {
	o.skipped, o.msg = true, format
	runtime.Goexit()
}

func TestRequireService(t *testing.T) {
	down := errors.New("connection refused")
	cases := []struct {
		name        string
		env         map[string]string
		err         error
		fail, skips bool
	}{
		{"reachable", map[string]string{RequireServicesEnv: "1"}, nil, false, false},
		{"unreachable, nothing set", nil, down, false, true},
		{"unreachable, required", map[string]string{RequireServicesEnv: "1"}, down, true, false},
		{"unreachable, CI=true", map[string]string{"CI": "true"}, down, true, false},
		// CI=1 alone is not a promise that services run; the CI script sets
		// FASTAGENT_REQUIRE_SERVICES=1 explicitly.
		{"unreachable, CI=1", map[string]string{"CI": "1"}, down, false, true},
		{"unreachable, required=0", map[string]string{RequireServicesEnv: "0"}, down, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := &outcomeTB{TB: t}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				requireService(o, func(k string) string { return c.env[k] }, "nats", "nats://127.0.0.1:1", c.err)
			}()
			wg.Wait()
			if o.failed != c.fail || o.skipped != c.skips {
				t.Fatalf("failed=%v skipped=%v, want failed=%v skipped=%v", o.failed, o.skipped, c.fail, c.skips)
			}
			if (c.fail || c.skips) && !strings.Contains(o.msg, "unreachable") {
				t.Errorf("message %q does not say why", o.msg)
			}
		})
	}
}
