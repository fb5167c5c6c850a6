package serve

import (
	"context"
	"errors"
	"io"
	"iter"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
)

func TestRedactDSN(t *testing.T) {
	cases := []struct{ in, want string }{
		{"postgres://fa:s3cret@db:5432/fa?sslmode=disable", "postgres://fa:xxxxx@db:5432/fa?sslmode=disable"},
		{"postgresql://fa:p@ss@db/fa", "postgresql://fa:xxxxx@db/fa"},
		{"postgres://fa@db/fa", "postgres://fa@db/fa"},
		{"host=db user=fa password=s3cret dbname=fa", "host=db user=fa password=xxxxx dbname=fa"},
		{"./data/sessions.db", "./data/sessions.db"},
		{"", ""},
	}
	for _, c := range cases {
		if got := RedactDSN(c.in); got != c.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(RedactDSN(c.in), "s3cret") {
			t.Errorf("RedactDSN(%q) keeps the password", c.in)
		}
	}
}

func TestAuthPerListenAddress(t *testing.T) {
	cases := []struct {
		name, host, token string
		wantErr, generate bool
	}{
		{"wildcard without tokens", "0.0.0.0", "", true, false},
		{"ipv6 wildcard without tokens", "::", "", true, false},
		{"public address without tokens", "10.1.2.3", "", true, false},
		{"name without tokens", "agent.example.com", "", true, false},
		{"wildcard with a token", "0.0.0.0", "configured", false, false},
		{"loopback without tokens", "127.0.0.1", "", false, true},
		{"localhost without tokens", "localhost", "", false, true},
		{"ipv6 loopback without tokens", "::1", "", false, true},
	}
	for _, c := range cases {
		dir := t.TempDir()
		p := &Parts{Config: Config{StateDir: dir, APIToken: c.token}}
		toks, generated, err := p.auth(c.host)
		if c.wantErr {
			if !errors.Is(err, ErrNoTokens) || !strings.Contains(err.Error(), "FASTAGENT_API_TOKEN") {
				t.Errorf("%s: err = %v, want ErrNoTokens naming FASTAGENT_API_TOKEN", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		file := filepath.Join(dir, TokenFileName)
		if !c.generate {
			if generated != "" {
				t.Errorf("%s: generated a token although one is configured", c.name)
			}
			if _, ok := toks.Lookup(c.token); !ok {
				t.Errorf("%s: the configured token is not accepted", c.name)
			}
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil || strings.TrimSpace(string(b)) != generated || generated == "" {
			t.Fatalf("%s: token file %q (%v), generated %q", c.name, b, err, generated)
		}
		if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: token file mode %v, want 0600", c.name, fi.Mode())
		}
		if p, ok := toks.Lookup(generated); !ok || !p.Admin() {
			t.Errorf("%s: the generated token is not an admin token", c.name)
		}
	}
}

func TestHTTPBlockAndStateDir(t *testing.T) {
	dir := t.TempDir()
	yaml := "http:\n  host: 127.0.0.2\n  port: 9999\n  allowedOrigins: [\"https://app.example.com\"]\n  allowedHosts: [agent.example.com]\n"
	if err := os.WriteFile(filepath.Join(dir, "fastagent.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		cfg      Config
		wantHost string
		wantPort int
	}{
		{"from fastagent.yaml", Config{}, "127.0.0.2", 9999},
		{"flags win", Config{HTTPHost: "127.0.0.3", HTTPPort: 7000}, "127.0.0.3", 7000},
	}
	for _, c := range cases {
		c.cfg.Dir = dir
		c.cfg.StateDir = filepath.Join(t.TempDir(), "state")
		p, err := Open(context.Background(), c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := p.Config
		p.Close()
		if got.HTTPHost != c.wantHost || got.HTTPPort != c.wantPort {
			t.Errorf("%s: listen %s:%d, want %s:%d", c.name, got.HTTPHost, got.HTTPPort, c.wantHost, c.wantPort)
		}
		if len(got.AllowedOrigins) != 1 || got.AllowedOrigins[0] != "https://app.example.com" || len(got.AllowedHosts) != 1 {
			t.Errorf("%s: origins %v hosts %v", c.name, got.AllowedOrigins, got.AllowedHosts)
		}
		if fi, err := os.Stat(c.cfg.StateDir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: state dir mode %v (%v), want 0700", c.name, fi.Mode(), err)
		}
	}
}

func TestHostPolicy(t *testing.T) {
	cases := []struct {
		host    string
		allowed []string
		want    []string
		any     bool
	}{
		{"127.0.0.1", nil, []string{"127.0.0.1"}, false},
		{"0.0.0.0", nil, nil, true},
		{"0.0.0.0", []string{"agent.example.com"}, []string{"agent.example.com"}, false},
		{"agent.internal", nil, []string{"agent.internal"}, false},
		// Mounted in a server whose address it does not know.
		{"", nil, nil, true},
		{"", []string{"agent.example.com"}, []string{"agent.example.com"}, false},
		{"127.0.0.1", []string{"*"}, nil, true},
	}
	for _, c := range cases {
		got, any := Config{AllowedHosts: c.allowed}.hostPolicy(c.host)
		if any != c.any || strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("hostPolicy(%q, %v) = %v %v, want %v %v", c.host, c.allowed, got, any, c.want, c.any)
		}
	}
}

// slowAgent answers with a few text events spread over wait.
type slowAgent struct{ wait time.Duration }

func (s slowAgent) Invoke(ctx context.Context, _ agent.Scope, _ agent.Prompt) iter.Seq[agent.Event] {
	return func(yield func(agent.Event) bool) {
		for i := 0; i < 4; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.wait / 4):
			}
			if !yield(agent.Text("x")) {
				return
			}
		}
		yield(agent.Completed(nil))
	}
}

// The server's ReadTimeout bounds reading a request, not an SSE stream that
// outlives it.
func TestReadTimeoutDoesNotCutStreams(t *testing.T) {
	saved := HTTPTimeouts
	defer func() { HTTPTimeouts = saved }()
	HTTPTimeouts.Read = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := (&Parts{}).IngressFor(slowAgent{wait: 1500 * time.Millisecond})
	srv.NoAuth = true
	srv.SetReady(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = ServeHTTP(ctx, ln, srv.Handler(), srv.Drain) }()
	resp, err := http.Post("http://"+ln.Addr().String()+"/invoke", "application/json", strings.NewReader(`{"session":"s","text":"t"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `"completed"`) || strings.Count(string(b), `"text"`) != 4 {
		t.Errorf("stream cut short by the read timeout:\n%s", b)
	}
}
