package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fastagent/fastagent/transcript"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteBusyTimeout is how long a connection waits for another connection or
// process holding the write lock before SQLite reports "database is locked".
const sqliteBusyTimeout = 10 * time.Second

const sqliteSchema = `
CREATE TABLE IF NOT EXISTS entries (
	session    TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	parent_id  TEXT    NOT NULL DEFAULT '',
	seq        INTEGER NOT NULL UNIQUE,
	type       TEXT    NOT NULL,
	data       TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (session, id)
);
CREATE INDEX IF NOT EXISTS entries_session_seq ON entries (session, seq);
CREATE TABLE IF NOT EXISTS turns (
	seq      INTEGER PRIMARY KEY AUTOINCREMENT,
	session  TEXT    NOT NULL,
	key      TEXT    NOT NULL,
	outcome  TEXT    NOT NULL,
	finished INTEGER NOT NULL,
	UNIQUE (session, key)
);
CREATE TABLE IF NOT EXISTS replies (
	session TEXT    NOT NULL,
	turn    TEXT    NOT NULL,
	ref     TEXT    NOT NULL,
	created INTEGER NOT NULL,
	PRIMARY KEY (session, turn)
);
CREATE TABLE IF NOT EXISTS heads (
	session TEXT    PRIMARY KEY,
	leaf    TEXT    NOT NULL,
	updated INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS owners (
	session   TEXT    PRIMARY KEY,
	principal TEXT    NOT NULL,
	created   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS memories (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	id      TEXT    NOT NULL UNIQUE,
	agent   TEXT    NOT NULL,
	owner   TEXT    NOT NULL,
	text    TEXT    NOT NULL,
	tags    TEXT    NOT NULL,
	session TEXT    NOT NULL,
	created INTEGER NOT NULL,
	scope   TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS memories_scope ON memories (agent, owner, seq);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
	text, tags, scope, content='memories', content_rowid='seq', tokenize='porter unicode61');
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
	INSERT INTO memories_fts (rowid, text, tags, scope) VALUES (new.seq, new.text, new.tags, new.scope);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
	INSERT INTO memories_fts (memories_fts, rowid, text, tags, scope) VALUES ('delete', old.seq, old.text, old.tags, old.scope);
END;
`

// SQLite is a Store in one SQLite file (modernc.org/sqlite, pure Go). The
// file uses WAL journaling and a busy timeout, so several processes can open
// and write the same file at once. seq is a global, strictly increasing
// append counter; created_at is Unix nanoseconds.
type SQLite struct {
	db        *sql.DB
	path      string
	cache     *entryCache
	closeOnce sync.Once
	closeErr  error
}

var _ Store = (*SQLite)(nil)

// OpenSQLite opens (creating if needed) the SQLite store at path and creates
// its schema. path must name a file: "" and in-memory databases (":memory:",
// mode=memory) are rejected, since each pooled connection would see a
// different database.
func OpenSQLite(path string) (*SQLite, error) {
	if path == "" {
		return nil, errors.New("store: sqlite: empty path (use a file path; in-memory databases are not supported)")
	}
	if strings.Contains(path, ":memory:") || strings.Contains(path, "mode=memory") {
		return nil, fmt.Errorf("store: sqlite: in-memory database %q is not supported, use a file path", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: sqlite: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("store: sqlite: create directory for %s: %w", abs, err)
	}
	// The file holds every transcript: readable by its owner only. SQLite
	// gives the -wal and -shm files the database file's mode.
	if f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600); err == nil {
		_ = f.Close()
		_ = os.Chmod(abs, 0o600)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqliteBusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate") // take the write lock at BEGIN: no lock upgrades, no deadlocks
	dsn := "file://" + (&url.URL{Path: filepath.ToSlash(abs)}).EscapedPath() + "?" + q.Encode()

	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: sqlite: open %s: %w", abs, err)
	}
	s := &SQLite{db: db, path: abs, cache: newEntryCache(DefaultEntryCacheBytes)}
	ctx := context.Background()
	err = retryBusy(ctx, func() error {
		_, err := db.ExecContext(ctx, sqliteSchema)
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: sqlite: create schema in %s: %w", abs, err)
	}
	return s, nil
}

// Path returns the absolute path of the database file.
func (s *SQLite) Path() string { return s.path }

// Append implements Store.
func (s *SQLite) Append(ctx context.Context, session string, entries ...transcript.Entry) error {
	data, err := encodeAll(session, entries)
	if err != nil || len(entries) == 0 {
		return err
	}
	inserted := make([]bool, len(entries))
	err = retryBusy(ctx, func() error {
		clear(inserted)
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		stmt, err := tx.PrepareContext(ctx, `
INSERT INTO entries (session, id, parent_id, seq, type, data, created_at)
VALUES (?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM entries), ?, ?, ?)
ON CONFLICT (session, id) DO NOTHING`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		now := time.Now().UnixNano()
		for i, e := range entries {
			res, err := stmt.ExecContext(ctx, session, e.ID, e.ParentID, e.Type, string(data[i]), now)
			if err != nil {
				return fmt.Errorf("entry %q: %w", e.ID, err)
			}
			n, err := res.RowsAffected()
			inserted[i] = err == nil && n == 1
		}
		return tx.Commit()
	})
	if err != nil {
		return fmt.Errorf("store: sqlite: append to session %q: %w", session, err)
	}
	s.cache.appended(session, data, inserted)
	return nil
}

// Get implements Store.
func (s *SQLite) Get(ctx context.Context, session, id string) (transcript.Entry, error) {
	if e, ok := s.cache.get(session, id); ok {
		return e, nil
	}
	var data string
	err := s.db.QueryRowContext(ctx, `SELECT data FROM entries WHERE session = ? AND id = ?`, session, id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return transcript.Entry{}, notFound(session, id)
	}
	if err != nil {
		return transcript.Entry{}, fmt.Errorf("store: sqlite: get %q in session %q: %w", id, session, err)
	}
	return s.cache.decoded(session, data)
}

// Branch implements Store.
func (s *SQLite) Branch(ctx context.Context, session, leafID string) ([]transcript.Entry, error) {
	if leafID == "" {
		return []transcript.Entry{}, nil
	}
	if b, ok := s.cache.branch(ctx, session, leafID, s.Get); ok {
		return b, nil
	}
	// The walk is capped at the session's entry count: a longer path can
	// only come from a parent cycle.
	rows, err := s.db.QueryContext(ctx, `
WITH RECURSIVE
	lim(n) AS (SELECT COUNT(*) FROM entries WHERE session = ?1),
	path(id, parent_id, data, depth) AS (
		SELECT id, parent_id, data, 0 FROM entries WHERE session = ?1 AND id = ?2
		UNION ALL
		SELECT e.id, e.parent_id, e.data, p.depth + 1
		FROM path p JOIN entries e ON e.session = ?1 AND e.id = p.parent_id
		WHERE p.parent_id <> '' AND p.depth < (SELECT n FROM lim)
	)
SELECT data, (SELECT n FROM lim) FROM path ORDER BY depth DESC`, session, leafID)
	if err != nil {
		return nil, fmt.Errorf("store: sqlite: branch %q in session %q: %w", leafID, session, err)
	}
	return s.cache.scanned(session, leafID, &sqlRows{rows})
}

// Entries implements Store.
func (s *SQLite) Entries(ctx context.Context, session string) ([]transcript.Entry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT data FROM entries WHERE session = ? ORDER BY seq`, session)
	if err != nil {
		return nil, fmt.Errorf("store: sqlite: entries of session %q: %w", session, err)
	}
	return scanEntries(session, &sqlRows{rows})
}

// Leaf implements Store.
func (s *SQLite) Leaf(ctx context.Context, session string) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, `SELECT id FROM entries WHERE session = ? ORDER BY seq DESC LIMIT 1`, session).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: sqlite: leaf of session %q: %w", session, err)
	}
	return id, nil
}

// Sessions implements Store.
func (s *SQLite) Sessions(ctx context.Context) ([]SessionInfo, error) {
	rows, err := s.db.QueryContext(ctx, sessionsQuery("entries"))
	if err != nil {
		return nil, fmt.Errorf("store: sqlite: sessions: %w", err)
	}
	defer rows.Close()
	out := []SessionInfo{}
	for rows.Next() {
		var si SessionInfo
		var updated int64
		if err := rows.Scan(&si.Session, &si.Entries, &si.Leaf, &updated); err != nil {
			return nil, fmt.Errorf("store: sqlite: sessions: %w", err)
		}
		si.Updated = time.Unix(0, updated).UTC()
		out = append(out, si)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: sqlite: sessions: %w", err)
	}
	return out, nil
}

// ListSessions implements Store.
func (s *SQLite) ListSessions(ctx context.Context, q SessionQuery) (SessionPage, error) {
	args, limit, err := listArgs(q)
	if err != nil {
		return SessionPage{}, err
	}
	rows, err := s.db.QueryContext(ctx, listQuery("entries", "turns", "owners", q, func(int, string) string { return "?" }), args...)
	if err != nil {
		return SessionPage{}, fmt.Errorf("store: sqlite: list sessions: %w", err)
	}
	defer rows.Close()
	var out []listRow
	for rows.Next() {
		var r listRow
		var updated int64
		if err := rows.Scan(&r.info.Session, &r.info.Entries, &r.info.Leaf, &updated, &r.seq, &r.info.Owner, &r.info.Turns); err != nil {
			return SessionPage{}, fmt.Errorf("store: sqlite: list sessions: %w", err)
		}
		r.info.Updated = time.Unix(0, updated).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return SessionPage{}, fmt.Errorf("store: sqlite: list sessions: %w", err)
	}
	return pageOf(out, limit), nil
}

// RecordTurn implements Store.
func (s *SQLite) RecordTurn(ctx context.Context, session string, rec TurnRecord) error {
	if err := validTurn(session, rec); err != nil {
		return err
	}
	err := retryBusy(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if !rec.Replaces.IsZero() {
			if _, err := tx.ExecContext(ctx, `DELETE FROM turns WHERE session = ? AND key = ? AND finished < ?`,
				session, rec.Key, rec.Replaces.UnixNano()); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `
INSERT INTO turns (session, key, outcome, finished) VALUES (?, ?, ?, ?)
ON CONFLICT (session, key) DO NOTHING`, session, rec.Key, string(rec.Outcome), rec.Finished.UnixNano()); err != nil {
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		return fmt.Errorf("store: sqlite: record turn %q in session %q: %w", rec.Key, session, err)
	}
	return nil
}

// SetHead implements Store.
func (s *SQLite) SetHead(ctx context.Context, session, leaf string) error {
	if err := validHead(session, leaf); err != nil {
		return err
	}
	err := retryBusy(ctx, func() error {
		_, err := s.db.ExecContext(ctx, `INSERT INTO heads (session, leaf, updated) VALUES (?, ?, ?)
ON CONFLICT (session) DO UPDATE SET leaf = excluded.leaf, updated = excluded.updated`, session, leaf, time.Now().UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("store: sqlite: set head of session %q: %w", session, err)
	}
	return nil
}

// Head implements Store.
func (s *SQLite) Head(ctx context.Context, session string) (string, error) {
	var leaf string
	err := s.db.QueryRowContext(ctx, `SELECT leaf FROM heads WHERE session = ?`, session).Scan(&leaf)
	if errors.Is(err, sql.ErrNoRows) {
		return "", headNotFound(session)
	}
	if err != nil {
		return "", fmt.Errorf("store: sqlite: head of session %q: %w", session, err)
	}
	return leaf, nil
}

// ClaimSession implements Store.
func (s *SQLite) ClaimSession(ctx context.Context, session, principal string) (string, error) {
	if err := validClaim(session, principal); err != nil {
		return "", err
	}
	var owner string
	err := retryBusy(ctx, func() error {
		if _, err := s.db.ExecContext(ctx, `INSERT INTO owners (session, principal, created) VALUES (?, ?, ?)
ON CONFLICT (session) DO NOTHING`, session, principal, time.Now().UnixNano()); err != nil {
			return err
		}
		return s.db.QueryRowContext(ctx, `SELECT principal FROM owners WHERE session = ?`, session).Scan(&owner)
	})
	if err != nil {
		return "", fmt.Errorf("store: sqlite: claim session %q: %w", session, err)
	}
	return owner, nil
}

// SaveReply implements Store.
func (s *SQLite) SaveReply(ctx context.Context, session, turn, ref string) error {
	if err := validReply(session, turn, ref); err != nil {
		return err
	}
	err := retryBusy(ctx, func() error {
		_, err := s.db.ExecContext(ctx, `INSERT INTO replies (session, turn, ref, created) VALUES (?, ?, ?, ?)
ON CONFLICT (session, turn) DO NOTHING`, session, turn, ref, time.Now().UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("store: sqlite: save reply of turn %q in session %q: %w", turn, session, err)
	}
	return nil
}

// Reply implements Store.
func (s *SQLite) Reply(ctx context.Context, session, turn string) (string, error) {
	var ref string
	err := s.db.QueryRowContext(ctx, `SELECT ref FROM replies WHERE session = ? AND turn = ?`, session, turn).Scan(&ref)
	if errors.Is(err, sql.ErrNoRows) {
		return "", replyNotFound(session, turn)
	}
	if err != nil {
		return "", fmt.Errorf("store: sqlite: reply of turn %q in session %q: %w", turn, session, err)
	}
	return ref, nil
}

// SessionOwner implements Store.
func (s *SQLite) SessionOwner(ctx context.Context, session string) (string, error) {
	var owner string
	err := s.db.QueryRowContext(ctx, `SELECT principal FROM owners WHERE session = ?`, session).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ownerNotFound(session)
	}
	if err != nil {
		return "", fmt.Errorf("store: sqlite: owner of session %q: %w", session, err)
	}
	return owner, nil
}

// Turn implements Store.
func (s *SQLite) Turn(ctx context.Context, session, key string) (TurnRecord, error) {
	return s.turn(ctx, session, key, s.db.QueryRowContext(ctx,
		`SELECT key, outcome, finished FROM turns WHERE session = ? AND key = ?`, session, key))
}

// LastTurn implements Store.
func (s *SQLite) LastTurn(ctx context.Context, session string) (TurnRecord, error) {
	return s.turn(ctx, session, "", s.db.QueryRowContext(ctx,
		`SELECT key, outcome, finished FROM turns WHERE session = ? ORDER BY seq DESC LIMIT 1`, session))
}

func (s *SQLite) turn(_ context.Context, session, key string, row *sql.Row) (TurnRecord, error) {
	var rec TurnRecord
	var outcome string
	var finished int64
	err := row.Scan(&rec.Key, &outcome, &finished)
	if errors.Is(err, sql.ErrNoRows) {
		return TurnRecord{}, turnNotFound(session, key)
	}
	if err != nil {
		return TurnRecord{}, fmt.Errorf("store: sqlite: turn %q in session %q: %w", key, session, err)
	}
	rec.Outcome = json.RawMessage(outcome)
	rec.Finished = time.Unix(0, finished).UTC()
	return rec, nil
}

// Close implements Store. Calling it more than once is harmless.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}

// retryBusy runs f until it succeeds, fails with something other than
// SQLITE_BUSY/SQLITE_LOCKED, or ctx ends. busy_timeout already waits inside
// SQLite; this is the backstop for the cases it does not cover.
func retryBusy(ctx context.Context, f func() error) error {
	delay := 5 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || !isBusy(err) || attempt >= 20 {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(delay):
		}
		if delay < 500*time.Millisecond {
			delay *= 2
		}
	}
}

func isBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// sqlRows adapts *sql.Rows to rowScanner.
type sqlRows struct{ *sql.Rows }

func (r *sqlRows) Close() { _ = r.Rows.Close() }

// DeleteSession implements Store.
func (s *SQLite) DeleteSession(ctx context.Context, session string) (int64, error) {
	if session == "" {
		return 0, errors.New("store: delete session: empty session")
	}
	var n int64
	err := retryBusy(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		for _, t := range sessionTables {
			res, err := tx.ExecContext(ctx, `DELETE FROM `+t+` WHERE session = ?`, session) //nolint:gosec // G202: t is from the constant list sessionTables
			if err != nil {
				return err
			}
			if t == "entries" {
				n, _ = res.RowsAffected()
			}
		}
		return tx.Commit()
	})
	if err != nil {
		return 0, fmt.Errorf("store: sqlite: delete session %q: %w", session, err)
	}
	s.cache.forget(session)
	return n, nil
}

// SubSessions implements Store.
func (s *SQLite) SubSessions(ctx context.Context, session string) ([]string, error) {
	prefix := session + "/"
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT session FROM (
SELECT session FROM entries UNION SELECT session FROM turns UNION SELECT session FROM heads)
WHERE substr(session, 1, ?) = ? ORDER BY session`, utf8.RuneCountInString(prefix), prefix)
	if err != nil {
		return nil, fmt.Errorf("store: sqlite: sub-sessions of %q: %w", session, err)
	}
	return scanNames(session, &sqlRows{rows})
}
