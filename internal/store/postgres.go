package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/fastagent/fastagent/transcript"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// postgresTable is the table entries live in. It is created in the first
// schema of the connection's search_path; to keep several deployments in one
// database apart, give each its own schema via the DSN
// (…?search_path=myschema) or its own database.
const postgresTable = "fastagent_entries"

// postgresTurns is the table finished turns are recorded in, beside postgresTable.
const postgresTurns = "fastagent_turns"

// postgresOwners records which principal created each session.
const postgresOwners = "fastagent_owners"

// postgresMemories keeps the agents' long-term memories (Store.Remember).
const postgresMemories = "fastagent_memories"

// postgresHeads records each session's head (Store.SetHead).
const postgresHeads = "fastagent_heads"

// postgresReplies records the platform message that answers each channel turn.
const postgresReplies = "fastagent_replies"

const postgresSchema = `
CREATE TABLE IF NOT EXISTS ` + postgresReplies + ` (
	session TEXT        NOT NULL,
	turn    TEXT        NOT NULL,
	ref     TEXT        NOT NULL,
	created TIMESTAMPTZ NOT NULL DEFAULT now(),
	PRIMARY KEY (session, turn)
);
CREATE TABLE IF NOT EXISTS ` + postgresTable + ` (
	session    TEXT        NOT NULL,
	id         TEXT        NOT NULL,
	parent_id  TEXT        NOT NULL DEFAULT '',
	seq        BIGSERIAL   NOT NULL,
	type       TEXT        NOT NULL,
	data       TEXT        NOT NULL,
	created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
	PRIMARY KEY (session, id)
);
CREATE INDEX IF NOT EXISTS ` + postgresTable + `_session_seq ON ` + postgresTable + ` (session, seq);
CREATE TABLE IF NOT EXISTS ` + postgresTurns + ` (
	session  TEXT        NOT NULL,
	key      TEXT        NOT NULL,
	outcome  TEXT        NOT NULL,
	finished TIMESTAMPTZ NOT NULL,
	seq      BIGSERIAL   NOT NULL,
	PRIMARY KEY (session, key)
);
CREATE INDEX IF NOT EXISTS ` + postgresTurns + `_session_seq ON ` + postgresTurns + ` (session, seq);
CREATE TABLE IF NOT EXISTS ` + postgresHeads + ` (
	session TEXT        PRIMARY KEY,
	leaf    TEXT        NOT NULL,
	updated TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ` + postgresOwners + ` (
	session   TEXT        PRIMARY KEY,
	principal TEXT        NOT NULL,
	created   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ` + postgresMemories + ` (
	seq     BIGSERIAL   NOT NULL,
	id      TEXT        PRIMARY KEY,
	agent   TEXT        NOT NULL,
	owner   TEXT        NOT NULL,
	text    TEXT        NOT NULL,
	tags    TEXT        NOT NULL,
	session TEXT        NOT NULL,
	created TIMESTAMPTZ NOT NULL DEFAULT now(),
	tsv     tsvector    GENERATED ALWAYS AS (to_tsvector('english', text || ' ' || tags)) STORED
);
CREATE INDEX IF NOT EXISTS ` + postgresMemories + `_tsv ON ` + postgresMemories + ` USING GIN (tsv);
CREATE INDEX IF NOT EXISTS ` + postgresMemories + `_scope ON ` + postgresMemories + ` (agent, owner, seq);
`

// postgresSchemaLock is the advisory lock key serialising schema creation, so
// that processes starting together do not race on CREATE TABLE.
const postgresSchemaLock = 0x66617374 // "fast"

// Postgres is a Store in a Postgres database (pgx/v5 connection pool). Entry
// data is stored as TEXT holding the codec's JSON, byte for byte; seq is a
// BIGSERIAL append counter.
type Postgres struct {
	pool  *pgxpool.Pool
	cache *entryCache
}

var _ Store = (*Postgres)(nil)

// OpenPostgres connects to the database at dsn (a postgres:// URL or a
// key=value string), checks the connection and creates the schema if it is
// missing.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: parse dsn: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: postgres: connect to %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(postgresSchemaLock)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, postgresSchema)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: postgres: create schema: %w", err)
	}
	return &Postgres{pool: pool, cache: newEntryCache(DefaultEntryCacheBytes)}, nil
}

// Append implements Store. Entries are inserted in order in one transaction;
// a transaction that loses a deadlock or serialization race is retried.
func (p *Postgres) Append(ctx context.Context, session string, entries ...transcript.Entry) error {
	data, err := encodeAll(session, entries)
	if err != nil || len(entries) == 0 {
		return err
	}
	const insert = `INSERT INTO ` + postgresTable + ` (session, id, parent_id, type, data)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT (session, id) DO NOTHING`
	delay := 5 * time.Millisecond
	inserted := make([]bool, len(entries))
	for attempt := 0; ; attempt++ {
		clear(inserted)
		err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			for i, e := range entries {
				b.Queue(insert, session, e.ID, e.ParentID, e.Type, string(data[i]))
			}
			br := tx.SendBatch(ctx, b)
			for i := range entries {
				tag, err := br.Exec()
				if err != nil {
					_ = br.Close()
					return err
				}
				inserted[i] = tag.RowsAffected() == 1
			}
			return br.Close()
		})
		if err == nil || !isRetryablePG(err) || attempt >= 10 {
			break
		}
		select {
		case <-ctx.Done():
			err = errors.Join(err, ctx.Err())
			return fmt.Errorf("store: postgres: append to session %q: %w", session, err)
		case <-time.After(delay):
		}
		delay *= 2
	}
	if err != nil {
		clear(inserted) // the last attempt's rows were not committed
		return fmt.Errorf("store: postgres: append to session %q: %w", session, err)
	}
	p.cache.appended(session, data, inserted)
	return nil
}

// Get implements Store.
func (p *Postgres) Get(ctx context.Context, session, id string) (transcript.Entry, error) {
	if e, ok := p.cache.get(session, id); ok {
		return e, nil
	}
	var data string
	err := p.pool.QueryRow(ctx, `SELECT data FROM `+postgresTable+` WHERE session = $1 AND id = $2`, session, id).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return transcript.Entry{}, notFound(session, id)
	}
	if err != nil {
		return transcript.Entry{}, fmt.Errorf("store: postgres: get %q in session %q: %w", id, session, err)
	}
	return p.cache.decoded(session, data)
}

// Branch implements Store.
func (p *Postgres) Branch(ctx context.Context, session, leafID string) ([]transcript.Entry, error) {
	if leafID == "" {
		return []transcript.Entry{}, nil
	}
	if b, ok := p.cache.branch(ctx, session, leafID, p.Get); ok {
		return b, nil
	}
	// The walk is capped at the session's entry count: a longer path can
	// only come from a parent cycle.
	rows, err := p.pool.Query(ctx, `
WITH RECURSIVE
	lim(n) AS (SELECT COUNT(*) FROM `+postgresTable+` WHERE session = $1),
	path(id, parent_id, data, depth) AS (
		SELECT id, parent_id, data, 0::bigint FROM `+postgresTable+` WHERE session = $1 AND id = $2
		UNION ALL
		SELECT e.id, e.parent_id, e.data, p.depth + 1
		FROM path p JOIN `+postgresTable+` e ON e.session = $1 AND e.id = p.parent_id
		WHERE p.parent_id <> '' AND p.depth < (SELECT n FROM lim)
	)
SELECT data, (SELECT n FROM lim) FROM path ORDER BY depth DESC`, session, leafID)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: branch %q in session %q: %w", leafID, session, err)
	}
	return p.cache.scanned(session, leafID, rows)
}

// Entries implements Store.
func (p *Postgres) Entries(ctx context.Context, session string) ([]transcript.Entry, error) {
	rows, err := p.pool.Query(ctx, `SELECT data FROM `+postgresTable+` WHERE session = $1 ORDER BY seq`, session)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: entries of session %q: %w", session, err)
	}
	return scanEntries(session, rows)
}

// Leaf implements Store.
func (p *Postgres) Leaf(ctx context.Context, session string) (string, error) {
	var id string
	err := p.pool.QueryRow(ctx, `SELECT id FROM `+postgresTable+` WHERE session = $1 ORDER BY seq DESC LIMIT 1`, session).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: postgres: leaf of session %q: %w", session, err)
	}
	return id, nil
}

// Sessions implements Store.
func (p *Postgres) Sessions(ctx context.Context) ([]SessionInfo, error) {
	rows, err := p.pool.Query(ctx, sessionsQuery(postgresTable))
	if err != nil {
		return nil, fmt.Errorf("store: postgres: sessions: %w", err)
	}
	defer rows.Close()
	out := []SessionInfo{}
	for rows.Next() {
		var si SessionInfo
		var n int64
		if err := rows.Scan(&si.Session, &n, &si.Leaf, &si.Updated); err != nil {
			return nil, fmt.Errorf("store: postgres: sessions: %w", err)
		}
		si.Entries = int(n)
		si.Updated = si.Updated.UTC()
		out = append(out, si)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: postgres: sessions: %w", err)
	}
	return out, nil
}

// ListSessions implements Store.
func (p *Postgres) ListSessions(ctx context.Context, q SessionQuery) (SessionPage, error) {
	args, limit, err := listArgs(q)
	if err != nil {
		return SessionPage{}, err
	}
	query := listQuery(postgresTable, postgresTurns, postgresOwners, q, func(n int, typ string) string {
		return fmt.Sprintf("$%d::%s", n, typ)
	})
	rows, err := p.pool.Query(ctx, query, args...)
	if err != nil {
		return SessionPage{}, fmt.Errorf("store: postgres: list sessions: %w", err)
	}
	defer rows.Close()
	var out []listRow
	for rows.Next() {
		var r listRow
		var n, turns int64
		if err := rows.Scan(&r.info.Session, &n, &r.info.Leaf, &r.info.Updated, &r.seq, &r.info.Owner, &turns); err != nil {
			return SessionPage{}, fmt.Errorf("store: postgres: list sessions: %w", err)
		}
		r.info.Entries, r.info.Turns = int(n), int(turns)
		r.info.Updated = r.info.Updated.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return SessionPage{}, fmt.Errorf("store: postgres: list sessions: %w", err)
	}
	return pageOf(out, limit), nil
}

// RecordTurn implements Store.
func (p *Postgres) RecordTurn(ctx context.Context, session string, rec TurnRecord) error {
	if err := validTurn(session, rec); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if !rec.Replaces.IsZero() {
			if _, err := tx.Exec(ctx, `DELETE FROM `+postgresTurns+` WHERE session = $1 AND key = $2 AND finished < $3`,
				session, rec.Key, rec.Replaces); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+postgresTurns+` (session, key, outcome, finished)
VALUES ($1, $2, $3, $4) ON CONFLICT (session, key) DO NOTHING`, session, rec.Key, string(rec.Outcome), rec.Finished)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: postgres: record turn %q in session %q: %w", rec.Key, session, err)
	}
	return nil
}

// SetHead implements Store.
func (p *Postgres) SetHead(ctx context.Context, session, leaf string) error {
	if err := validHead(session, leaf); err != nil {
		return err
	}
	_, err := p.pool.Exec(ctx, `INSERT INTO `+postgresHeads+` (session, leaf, updated) VALUES ($1, $2, now())
ON CONFLICT (session) DO UPDATE SET leaf = EXCLUDED.leaf, updated = EXCLUDED.updated`, session, leaf)
	if err != nil {
		return fmt.Errorf("store: postgres: set head of session %q: %w", session, err)
	}
	return nil
}

// Head implements Store.
func (p *Postgres) Head(ctx context.Context, session string) (string, error) {
	var leaf string
	err := p.pool.QueryRow(ctx, `SELECT leaf FROM `+postgresHeads+` WHERE session = $1`, session).Scan(&leaf)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", headNotFound(session)
	}
	if err != nil {
		return "", fmt.Errorf("store: postgres: head of session %q: %w", session, err)
	}
	return leaf, nil
}

// ClaimSession implements Store.
func (p *Postgres) ClaimSession(ctx context.Context, session, principal string) (string, error) {
	if err := validClaim(session, principal); err != nil {
		return "", err
	}
	// The no-op update makes RETURNING yield the row that won either way.
	var owner string
	err := p.pool.QueryRow(ctx, `INSERT INTO `+postgresOwners+` (session, principal) VALUES ($1, $2)
ON CONFLICT (session) DO UPDATE SET session = EXCLUDED.session RETURNING principal`, session, principal).Scan(&owner)
	if err != nil {
		return "", fmt.Errorf("store: postgres: claim session %q: %w", session, err)
	}
	return owner, nil
}

// SaveReply implements Store.
func (p *Postgres) SaveReply(ctx context.Context, session, turn, ref string) error {
	if err := validReply(session, turn, ref); err != nil {
		return err
	}
	_, err := p.pool.Exec(ctx, `INSERT INTO `+postgresReplies+` (session, turn, ref) VALUES ($1, $2, $3)
ON CONFLICT (session, turn) DO NOTHING`, session, turn, ref)
	if err != nil {
		return fmt.Errorf("store: postgres: save reply of turn %q in session %q: %w", turn, session, err)
	}
	return nil
}

// Reply implements Store.
func (p *Postgres) Reply(ctx context.Context, session, turn string) (string, error) {
	var ref string
	err := p.pool.QueryRow(ctx, `SELECT ref FROM `+postgresReplies+` WHERE session = $1 AND turn = $2`, session, turn).Scan(&ref)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", replyNotFound(session, turn)
	}
	if err != nil {
		return "", fmt.Errorf("store: postgres: reply of turn %q in session %q: %w", turn, session, err)
	}
	return ref, nil
}

// SessionOwner implements Store.
func (p *Postgres) SessionOwner(ctx context.Context, session string) (string, error) {
	var owner string
	err := p.pool.QueryRow(ctx, `SELECT principal FROM `+postgresOwners+` WHERE session = $1`, session).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ownerNotFound(session)
	}
	if err != nil {
		return "", fmt.Errorf("store: postgres: owner of session %q: %w", session, err)
	}
	return owner, nil
}

// Turn implements Store.
func (p *Postgres) Turn(ctx context.Context, session, key string) (TurnRecord, error) {
	return p.turn(session, key, p.pool.QueryRow(ctx,
		`SELECT key, outcome, finished FROM `+postgresTurns+` WHERE session = $1 AND key = $2`, session, key))
}

// LastTurn implements Store.
func (p *Postgres) LastTurn(ctx context.Context, session string) (TurnRecord, error) {
	return p.turn(session, "", p.pool.QueryRow(ctx,
		`SELECT key, outcome, finished FROM `+postgresTurns+` WHERE session = $1 ORDER BY seq DESC LIMIT 1`, session))
}

func (p *Postgres) turn(session, key string, row pgx.Row) (TurnRecord, error) {
	var rec TurnRecord
	var outcome string
	err := row.Scan(&rec.Key, &outcome, &rec.Finished)
	if errors.Is(err, pgx.ErrNoRows) {
		return TurnRecord{}, turnNotFound(session, key)
	}
	if err != nil {
		return TurnRecord{}, fmt.Errorf("store: postgres: turn %q in session %q: %w", key, session, err)
	}
	rec.Outcome = json.RawMessage(outcome)
	rec.Finished = rec.Finished.UTC()
	return rec, nil
}

// Close implements Store. Calling it more than once is harmless.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// isRetryablePG reports a deadlock or serialization failure, after which the
// whole transaction may simply be run again.
func isRetryablePG(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "40P01" || pe.Code == "40001"
}

// postgresSessionTables are sessionTables as this store names them.
var postgresSessionTables = []string{postgresTable, postgresTurns, postgresReplies, postgresHeads}

// DeleteSession implements Store.
func (p *Postgres) DeleteSession(ctx context.Context, session string) (int64, error) {
	if session == "" {
		return 0, errors.New("store: delete session: empty session")
	}
	var n int64
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		for _, t := range postgresSessionTables {
			tag, err := tx.Exec(ctx, `DELETE FROM `+t+` WHERE session = $1`, session)
			if err != nil {
				return err
			}
			if t == postgresTable {
				n = tag.RowsAffected()
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: postgres: delete session %q: %w", session, err)
	}
	p.cache.forget(session)
	return n, nil
}

// SubSessions implements Store.
func (p *Postgres) SubSessions(ctx context.Context, session string) ([]string, error) {
	prefix := session + "/"
	rows, err := p.pool.Query(ctx, `SELECT DISTINCT session FROM (
SELECT session FROM `+postgresTable+` UNION SELECT session FROM `+postgresTurns+` UNION SELECT session FROM `+postgresHeads+`) s
WHERE left(session, $1) = $2 ORDER BY session`, utf8.RuneCountInString(prefix), prefix)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: sub-sessions of %q: %w", session, err)
	}
	return scanNames(session, rows)
}
