package serve

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/workspace"
)

// components opens a store, a feed and a loader in a temporary workspace,
// closed at the end of the test.
func components(t *testing.T) (string, Components) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.OpenSQLite(filepath.Join(dir, "given.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	loader, err := workspace.NewLoader(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(loader.Close)
	loader.Sandbox = sandbox.Open(sandbox.Config{Mode: sandbox.Off})
	return dir, Components{Store: st, Feed: bus, Loader: loader}
}

// Components given to Assemble are used — by the activities, the durable
// agent (its Store: a turn whose feed lost steps is filled in from it) and
// the worker's sandbox — and stay open after Parts.Close: they are the
// caller's.
func TestAssembleUsesAndKeepsComponents(t *testing.T) {
	ctx := context.Background()
	dir, with := components(t)
	p, err := Assemble(ctx, Config{Dir: dir, TaskQueue: "q"}, with)
	if err != nil {
		t.Fatal(err)
	}
	if p.Acts.Store != with.Store || p.Acts.Feed != with.Feed || p.Acts.Definitions != with.Loader {
		t.Errorf("activities do not use the given components: %+v", p.Acts)
	}
	a := p.Agent(nil)
	if a.Store != with.Store || a.Feed != with.Feed || a.TaskQueue != "q" {
		t.Errorf("durable agent: store %v feed %v queue %q, want the given ones", a.Store, a.Feed, a.TaskQueue)
	}
	if p.Sandbox != with.Loader.Sandbox {
		t.Error("the given loader's sandbox is not the worker's")
	}
	p.Close()
	p.Close() // a second call is a no-op
	if _, err := with.Store.ListSessions(ctx, store.SessionQuery{}); err != nil {
		t.Errorf("the given store was closed: %v", err)
	}
	if _, err := with.Feed.Subscribe(ctx, "s", "t"); err != nil {
		t.Errorf("the given feed was closed: %v", err)
	}
	if st := with.Loader.Sandbox.Status(); st.Mode != sandbox.Off {
		t.Errorf("the given sandbox changed: %+v", st)
	}
}

// What Assemble opens itself (here the store and the feed), Close closes.
func TestAssembleClosesWhatItOpened(t *testing.T) {
	ctx := context.Background()
	dir, with := components(t)
	with.Store, with.Feed = nil, nil
	p, err := Assemble(ctx, Config{Dir: dir}, with)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Store.ListSessions(ctx, store.SessionQuery{}); err != nil {
		t.Fatalf("opened store: %v", err)
	}
	p.Close()
	if _, err := p.Store.ListSessions(ctx, store.SessionQuery{}); err == nil {
		t.Error("the store Assemble opened is still open after Close")
	}
	if _, err := p.Feed.Subscribe(ctx, "s", "t"); err == nil {
		t.Error("the feed Assemble opened is still open after Close")
	}
}

// IngressFor gives a durable agent's ingress the session control plane
// and leaves it off for an agent without one.
func TestIngressFor(t *testing.T) {
	dir, with := components(t)
	p, err := Assemble(context.Background(), Config{Dir: dir}, with)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	d := p.Agent(nil)
	s := p.IngressFor(d)
	if s.Agent != d || s.Control != d || s.Attacher != d || s.Sessions != d || s.Logger != p.Config.Logger {
		t.Errorf("durable ingress: %+v", s)
	}
	plain := p.IngressFor(slowAgent{})
	if plain.Control != nil || plain.Attacher != nil || plain.Sessions != nil {
		t.Errorf("a plain agent got a control plane: %+v", plain)
	}
	if s := p.Ingress(nil); s.Control == nil || s.Agent.(*durable.Agent).Store != with.Store {
		t.Errorf("Ingress: %+v", s)
	}
}

// fastagent.yaml's limits.perPrincipal reaches the ingress: every
// IngressFor shares one limiter (a principal's turns count across
// agents), and a durable agent's ingress deletes sessions.
func TestIngressForPrincipalLimits(t *testing.T) {
	dir, with := components(t)
	with.Loader = nil
	yaml := "limits:\n  perPrincipal: {concurrentTurns: 2, turnsPerMinute: 10, exempt: [ci-bot]}\n"
	if err := os.WriteFile(filepath.Join(dir, workspace.ConfigFile), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Assemble(context.Background(), Config{Dir: dir}, with)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := ingress.PrincipalLimits{ConcurrentTurns: 2, TurnsPerMinute: 10, ExemptAdmins: true, Exempt: []string{"ci-bot"}}
	if got := p.Config.PerPrincipal; !reflect.DeepEqual(got, want) {
		t.Errorf("Config.PerPrincipal = %+v, want %+v", got, want)
	}
	d := p.Agent(nil)
	a, b := p.IngressFor(d), p.IngressFor(d)
	if a.PrincipalLimiter == nil || a.PrincipalLimiter != b.PrincipalLimiter {
		t.Errorf("limiters %p %p: want one shared", a.PrincipalLimiter, b.PrincipalLimiter)
	}
	if a.Deleter == nil {
		t.Error("a durable agent's ingress cannot delete sessions")
	}
}
