package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/store/storetest"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/jackc/pgx/v5"
)

// postgresAdminDSN is the server the Postgres tests create their throwaway
// databases on; FASTAGENT_TEST_POSTGRES overrides it.
func postgresAdminDSN() string {
	if dsn := os.Getenv("FASTAGENT_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

var (
	pgOnce sync.Once
	pgErr  error
)

// requirePostgres skips the test when the server is unreachable, or fails it
// when services are required (testkit.RequireService).
func requirePostgres(t testing.TB) {
	t.Helper()
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, postgresAdminDSN())
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		pgErr = err
	})
	testkit.RequireService(t, "postgres", postgresAdminDSN(), pgErr)
}

// freshDatabase creates an empty database on the test server, dropped when
// the test ends, and returns its DSN.
func freshDatabase(t testing.TB) string {
	t.Helper()
	requirePostgres(t)
	ctx := context.Background()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "fastagent_test_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, postgresAdminDSN())
	if err != nil {
		t.Fatalf("connect to Postgres: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		admin, err := pgx.Connect(ctx, postgresAdminDSN())
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(postgresAdminDSN())
	if err != nil {
		t.Fatalf("parse %s: %v", postgresAdminDSN(), err)
	}
	u.Path = "/" + name
	return u.String()
}

func openTempPostgres(t testing.TB) *store.Postgres {
	t.Helper()
	dsn := freshDatabase(t)
	s, err := store.OpenPostgres(context.Background(), dsn)
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	return s
}

func TestPostgres(t *testing.T) {
	requirePostgres(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openTempPostgres(t) })
}

func TestPostgresShared(t *testing.T) {
	requirePostgres(t)
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		dsn := freshDatabase(t)
		a, err := store.OpenPostgres(context.Background(), dsn)
		if err != nil {
			t.Fatalf("OpenPostgres: %v", err)
		}
		b, err := store.OpenPostgres(context.Background(), dsn)
		if err != nil {
			t.Fatalf("OpenPostgres: %v", err)
		}
		return a, b
	})
}

// TestPostgresTwoPools simulates two processes sharing one database, both
// opening it (racing schema creation) and appending at once.
func TestPostgresTwoPools(t *testing.T) {
	dsn := freshDatabase(t)
	ctx := context.Background()
	handles := make([]*store.Postgres, 2)
	var wg sync.WaitGroup
	openErrs := make([]error, 2)
	for i := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			handles[i], openErrs[i] = store.OpenPostgres(ctx, dsn)
		}()
	}
	wg.Wait()
	for i, err := range openErrs {
		if err != nil {
			t.Fatalf("OpenPostgres #%d: %v", i, err)
		}
		t.Cleanup(func() { handles[i].Close() })
	}
	const perWriter = 30
	var writers []string
	errs := make(chan error, 8)
	for h, s := range handles {
		for g := range 4 {
			name := fmt.Sprintf("h%d-g%d", h, g)
			writers = append(writers, name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWriter {
					if err := s.Append(ctx, "shared", entry(fmt.Sprintf("%s-%03d", name, i))); err != nil {
						errs <- err
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
}

func TestOpenChoosesPostgres(t *testing.T) {
	dsn := freshDatabase(t)
	for _, d := range []string{dsn, "postgresql" + dsn[len("postgres"):]} {
		s, err := store.Open(context.Background(), d)
		if err != nil {
			t.Fatalf("Open(%q): %v", d, err)
		}
		if _, ok := s.(*store.Postgres); !ok {
			t.Errorf("Open(%q) = %T, want *store.Postgres", d, s)
		}
		s.Close()
	}
}

func TestOpenPostgresUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := store.OpenPostgres(ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	if err == nil {
		s.Close()
		t.Fatal("OpenPostgres on a closed port succeeded, want an error")
	}
}
