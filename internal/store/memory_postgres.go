package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

const postgresMemoryCols = `id, agent, owner, text, tags, session, created`

func pgPlaceholder(n int) string { return "$" + strconv.Itoa(n) }

// Remember implements Store.
func (p *Postgres) Remember(ctx context.Context, m Memory, key string) (Memory, error) {
	if err := validMemory(m, key); err != nil {
		return Memory{}, err
	}
	m.ID = MemoryID(m.Agent, key)
	// The no-op update makes RETURNING yield the row that won either way.
	out, err := scanPGMemory(p.pool.QueryRow(ctx, `INSERT INTO `+postgresMemories+` (id, agent, owner, text, tags, session)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id RETURNING `+postgresMemoryCols,
		m.ID, m.Agent, m.Owner, m.Text, encodeTags(m.Tags), m.Session))
	if err != nil {
		return Memory{}, fmt.Errorf("store: postgres: remember: %w", err)
	}
	return out, nil
}

// Recall implements Store: full text on a generated tsvector (English
// stemming) ranked by ts_rank, any of the query's words matching.
func (p *Postgres) Recall(ctx context.Context, q MemoryQuery) ([]Memory, error) {
	var query string
	var args []any
	if words := searchWords(q.Text); len(words) > 0 {
		terms := make([]string, len(words))
		for i, w := range words {
			terms[i] = "'" + w + "'"
		}
		where, sargs := scopeSQL(q.MemoryScope, 2, pgPlaceholder)
		args = append([]any{strings.Join(terms, " | ")}, sargs...)
		query = `SELECT ` + postgresMemoryCols + ` FROM ` + postgresMemories + `, to_tsquery('english', $1) q
WHERE tsv @@ q AND ` + where + ` ORDER BY ts_rank(tsv, q) DESC, seq DESC LIMIT ` + pgPlaceholder(len(args)+1)
	} else {
		where, sargs := scopeSQL(q.MemoryScope, 1, pgPlaceholder)
		args = sargs
		query = `SELECT ` + postgresMemoryCols + ` FROM ` + postgresMemories + ` WHERE ` + where +
			` ORDER BY seq DESC LIMIT ` + pgPlaceholder(len(args)+1)
	}
	args = append(args, recallLimit(q.Limit))
	rows, err := p.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: recall: %w", err)
	}
	defer rows.Close()
	var out []Memory
	for rows.Next() {
		m, err := scanPGMemory(rows)
		if err != nil {
			return nil, fmt.Errorf("store: postgres: recall: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: postgres: recall: %w", err)
	}
	return out, nil
}

// Forget implements Store.
func (p *Postgres) Forget(ctx context.Context, scope MemoryScope, id string) (Memory, error) {
	where, args := scopeSQL(scope, 2, pgPlaceholder)
	out, err := scanPGMemory(p.pool.QueryRow(ctx, `DELETE FROM `+postgresMemories+` WHERE id = $1 AND `+where+
		` RETURNING `+postgresMemoryCols, append([]any{id}, args...)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return Memory{}, fmt.Errorf("%w: no memory %q", ErrNotFound, id)
	}
	if err != nil {
		return Memory{}, fmt.Errorf("store: postgres: forget %q: %w", id, err)
	}
	return out, nil
}

func scanPGMemory(row pgx.Row) (Memory, error) {
	var m Memory
	var tags string
	if err := row.Scan(&m.ID, &m.Agent, &m.Owner, &m.Text, &tags, &m.Session, &m.Created); err != nil {
		return Memory{}, err
	}
	m.Tags, m.Created = decodeTags(tags), m.Created.UTC()
	return m, nil
}
