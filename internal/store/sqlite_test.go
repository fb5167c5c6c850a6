package store_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/store/storetest"
	"github.com/fastagent/fastagent/transcript"
)

func openTempSQLite(t testing.TB) *store.SQLite {
	t.Helper()
	s, err := store.OpenSQLite(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatalf("OpenSQLite: %v", err)
	}
	return s
}

func TestSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTempSQLite(t) })
}

func entry(id string) transcript.Entry {
	return transcript.Entry{
		ID: id, Type: transcript.TypeMessage, Time: time.Now(),
		Message: &transcript.Message{Role: transcript.RoleUser, Text: "text of " + id},
	}
}

// checkAll asserts that session holds exactly the entries named by want, each
// once, and that each writer's entries are in the order it wrote them.
func checkAll(t *testing.T, s store.Store, session string, writers []string, perWriter int) {
	t.Helper()
	got, err := s.Entries(context.Background(), session)
	if err != nil {
		t.Fatalf("Entries: %v", err)
	}
	pos := map[string]int{}
	for i, e := range got {
		if _, dup := pos[e.ID]; dup {
			t.Errorf("entry %q stored twice", e.ID)
		}
		pos[e.ID] = i
	}
	if want := len(writers) * perWriter; len(got) != want {
		t.Errorf("got %d entries, want %d", len(got), want)
	}
	for _, w := range writers {
		last := -1
		for i := range perWriter {
			id := fmt.Sprintf("%s-%03d", w, i)
			p, ok := pos[id]
			if !ok {
				t.Errorf("entry %q lost", id)
				continue
			}
			if p < last {
				t.Errorf("entry %q out of order", id)
			}
			last = p
		}
	}
}

// TestSQLiteTwoHandles simulates two processes: two independent *SQLite on
// one file, both appending at once.
func TestSQLiteShared(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		path := filepath.Join(t.TempDir(), "shared.db")
		a, err := store.OpenSQLite(path)
		if err != nil {
			t.Fatalf("OpenSQLite: %v", err)
		}
		b, err := store.OpenSQLite(path)
		if err != nil {
			t.Fatalf("OpenSQLite: %v", err)
		}
		return a, b
	})
}

func TestSQLiteTwoHandles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	var handles []*store.SQLite
	for range 2 {
		s, err := store.OpenSQLite(path)
		if err != nil {
			t.Fatalf("OpenSQLite: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		handles = append(handles, s)
	}
	const perWriter = 50
	var writers []string
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for h, s := range handles {
		for g := range 4 {
			name := fmt.Sprintf("h%d-g%d", h, g)
			writers = append(writers, name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWriter {
					if err := s.Append(context.Background(), "shared", entry(fmt.Sprintf("%s-%03d", name, i))); err != nil {
						errs <- fmt.Errorf("%s append %d: %w", name, i, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkAll(t, handles[0], "shared", writers, perWriter)
	checkAll(t, handles[1], "shared", writers, perWriter)
}

const childEnv = "FASTAGENT_STORE_TEST_CHILD"

// TestSQLiteChildProcess is the body of the child processes started by
// TestSQLiteMultiProcess; on its own it does nothing.
func TestSQLiteChildProcess(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("helper for TestSQLiteMultiProcess")
	}
	// spec: path|writer|count
	parts := strings.Split(spec, "|")
	if len(parts) != 3 {
		t.Fatalf("bad %s=%q", childEnv, spec)
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(context.Background(), "sqlite://"+parts[0])
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	for i := range n {
		if err := s.Append(context.Background(), "shared", entry(fmt.Sprintf("%s-%03d", parts[1], i))); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

// TestSQLiteMultiProcess has real separate processes (this test binary
// re-run) and this one append to one file at the same time.
func TestSQLiteMultiProcess(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in child")
	}
	path := filepath.Join(t.TempDir(), "multi.db")
	const perWriter = 60
	writers := []string{"parent", "child0", "child1"}
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for _, w := range writers[1:] {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSQLiteChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d", childEnv, path, w, perWriter))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start child: %v", err)
		}
		cmds = append(cmds, cmd)
		outs = append(outs, out)
	}
	s, err := store.OpenSQLite(path)
	if err != nil {
		t.Fatalf("OpenSQLite: %v", err)
	}
	defer s.Close()
	for i := range perWriter {
		if err := s.Append(context.Background(), "shared", entry(fmt.Sprintf("parent-%03d", i))); err != nil {
			t.Fatalf("parent append %d: %v", i, err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d failed: %v\n%s", i, err, outs[i])
		}
	}
	checkAll(t, s, "shared", writers, perWriter)
}

func TestSQLitePersistsAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "persist.db")
	s, err := store.OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(context.Background(), "sess", entry("a"), entry("b")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = store.OpenSQLite(path) // schema creation must be idempotent
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	leaf, err := s.Leaf(context.Background(), "sess")
	if err != nil || leaf != "b" {
		t.Fatalf("Leaf after reopen = %q, %v; want b", leaf, err)
	}
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
}

func TestOpenSQLiteRejectsMemory(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file::memory:?cache=shared", "file:x?mode=memory"} {
		if s, err := store.OpenSQLite(p); err == nil {
			s.Close()
			t.Errorf("OpenSQLite(%q) succeeded, want an error", p)
		}
	}
}

func TestOpenChoosesDriver(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx := context.Background()
	for _, dsn := range []string{
		"sqlite://" + filepath.Join(dir, "abs.db"), // sqlite:///abs/path
		"sqlite:rel.db",
		"sqlite://rel2.db",
		filepath.Join(dir, "plain.db"),
		"plain-relative.db",
	} {
		s, err := store.Open(ctx, dsn)
		if err != nil {
			t.Errorf("Open(%q): %v", dsn, err)
			continue
		}
		if _, ok := s.(*store.SQLite); !ok {
			t.Errorf("Open(%q) = %T, want *store.SQLite", dsn, s)
		}
		if err := s.Append(ctx, "s", entry("e")); err != nil {
			t.Errorf("Open(%q): Append: %v", dsn, err)
		}
		s.Close()
	}
	for _, name := range []string{"abs.db", "rel.db", "rel2.db", "plain.db", "plain-relative.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("expected database file %s: %v", name, err)
		}
	}
	for _, dsn := range []string{"", "mysql://root@localhost/db", "sqlite://", "redis://x"} {
		s, err := store.Open(ctx, dsn)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", dsn)
			continue
		}
		if !strings.Contains(err.Error(), "accepted") {
			t.Errorf("Open(%q) error %q does not say what is accepted", dsn, err)
		}
	}
}

// TestSQLiteFileMode: the database (and its WAL) is readable by its owner
// only, whatever the umask.
func TestSQLiteFileMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := store.OpenSQLite(filepath.Join(dir, "sessions.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(context.Background(), "s", transcript.Entry{ID: "a", Type: transcript.TypeMessage}); err != nil {
		t.Logf("append: %v", err)
	}
	for _, name := range []string{"sessions.db", "sessions.db-wal"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			if name == "sessions.db" {
				t.Fatal(err)
			}
			continue
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s mode %o, want no group/other access", name, perm)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("created directory mode %v (%v), want 0700", fi.Mode(), err)
	}
}

// TestOpenKeyValueDSN: a libpq key=value DSN ("host=db user=fa
// password=…", or with passfile=…, which fastagent's flag refusal points
// to) is Postgres, never a SQLite file of that name in the working
// directory — where the password, in the file's name, would be listed by
// every tool.
func TestOpenKeyValueDSN(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, dsn := range []string{
		"host=127.0.0.1 port=1 user=fastagent password=pw-2b7c connect_timeout=2",
		"user=fastagent passfile=/nonexistent/pgpass host=127.0.0.1 port=1 connect_timeout=2",
		" dbname = fastagent host=127.0.0.1 port=1 connect_timeout=2",
	} {
		s, err := store.Open(ctx, dsn)
		if err == nil {
			if _, ok := s.(*store.SQLite); ok {
				t.Errorf("Open(%q) opened a SQLite file", dsn)
			}
			s.Close()
		} else if !strings.Contains(err.Error(), "postgres") {
			t.Errorf("Open(%q): %v, want a Postgres error", dsn, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("Open of key=value DSNs made files in the working directory: %v", entries)
	}
}
