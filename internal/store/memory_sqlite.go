package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

const sqliteMemoryCols = `m.id, m.agent, m.owner, m.text, m.tags, m.session, m.created`

// Remember implements Store.
func (s *SQLite) Remember(ctx context.Context, m Memory, key string) (Memory, error) {
	if err := validMemory(m, key); err != nil {
		return Memory{}, err
	}
	m.ID = MemoryID(m.Agent, key)
	var out Memory
	err := retryBusy(ctx, func() error {
		if _, err := s.db.ExecContext(ctx, `INSERT INTO memories (id, agent, owner, text, tags, session, created, scope)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			m.ID, m.Agent, m.Owner, m.Text, encodeTags(m.Tags), m.Session, time.Now().UnixNano(), scopeToken(m.Agent, m.Owner)); err != nil {
			return err
		}
		var err error
		out, err = scanSQLiteMemory(s.db.QueryRowContext(ctx, `SELECT `+sqliteMemoryCols+` FROM memories m WHERE m.id = ?`, m.ID))
		return err
	})
	if err != nil {
		return Memory{}, fmt.Errorf("store: sqlite: remember: %w", err)
	}
	return out, nil
}

// Recall implements Store: FTS5 (porter stemming) ranked by bm25, any of
// the query's words matching.
func (s *SQLite) Recall(ctx context.Context, q MemoryQuery) ([]Memory, error) {
	where, args := scopeSQL(q.MemoryScope, 1, func(int) string { return "?" })
	where = prefixCols(where, "m.")
	var query string
	if words := searchWords(q.Text); len(words) > 0 {
		terms := make([]string, len(words))
		for i, w := range words {
			terms[i] = `"` + w + `"`
		}
		match := "{text tags} : (" + strings.Join(terms, " OR ") + ")"
		// A scope of one agent is also a full-text term (scopeToken), so
		// only the scope's matches are ranked, not every agent's and
		// principal's.
		if q.Agent != "" && !q.All && len(q.Owners) > 0 {
			toks := make([]string, len(q.Owners))
			for i, o := range q.Owners {
				toks[i] = `"` + scopeToken(q.Agent, o) + `"`
			}
			match = "scope : (" + strings.Join(toks, " OR ") + ") AND " + match
		}
		// The matches are found first (MATERIALIZED): joined the other
		// way, SQLite would run the full-text query once per scoped row.
		query = `WITH hits AS MATERIALIZED (SELECT rowid, bm25(memories_fts, 1.0, 1.0, 0.0) AS score FROM memories_fts WHERE memories_fts MATCH ?)
SELECT ` + sqliteMemoryCols + ` FROM hits h JOIN memories m ON m.seq = h.rowid
WHERE ` + where + ` ORDER BY h.score, m.seq DESC LIMIT ?`
		args = append([]any{match}, args...)
	} else {
		query = `SELECT ` + sqliteMemoryCols + ` FROM memories m WHERE ` + where + ` ORDER BY m.seq DESC LIMIT ?`
	}
	args = append(args, recallLimit(q.Limit))
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: sqlite: recall: %w", err)
	}
	defer rows.Close()
	var out []Memory
	for rows.Next() {
		m, err := scanSQLiteMemory(rows)
		if err != nil {
			return nil, fmt.Errorf("store: sqlite: recall: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: sqlite: recall: %w", err)
	}
	return out, nil
}

// Forget implements Store.
func (s *SQLite) Forget(ctx context.Context, scope MemoryScope, id string) (Memory, error) {
	where, args := scopeSQL(scope, 2, func(int) string { return "?" })
	var out Memory
	err := retryBusy(ctx, func() error {
		var err error
		out, err = scanSQLiteMemory(s.db.QueryRowContext(ctx, `DELETE FROM memories WHERE id = ? AND `+where+
			` RETURNING id, agent, owner, text, tags, session, created`, append([]any{id}, args...)...))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Memory{}, fmt.Errorf("%w: no memory %q", ErrNotFound, id)
	}
	if err != nil {
		return Memory{}, fmt.Errorf("store: sqlite: forget %q: %w", id, err)
	}
	return out, nil
}

func scanSQLiteMemory(row interface{ Scan(...any) error }) (Memory, error) {
	var m Memory
	var tags string
	var created int64
	if err := row.Scan(&m.ID, &m.Agent, &m.Owner, &m.Text, &tags, &m.Session, &created); err != nil {
		return Memory{}, err
	}
	m.Tags, m.Created = decodeTags(tags), time.Unix(0, created).UTC()
	return m, nil
}
