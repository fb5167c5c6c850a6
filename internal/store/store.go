// Package store keeps session transcripts: append-only entries linked by
// parent IDs. Drivers: SQLite (embedded default, pure Go) and Postgres
// (production). Appends are idempotent by (session, entry ID), so an activity
// retried after a crash never duplicates an entry.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fastagent/fastagent/transcript"
)

// ErrNotFound is returned when an entry or session does not exist.
var ErrNotFound = errors.New("store: not found")

// ErrBrokenBranch is returned by Branch when an entry of the walk names a
// parent the session does not hold: the context would silently be shorter.
var ErrBrokenBranch = errors.New("store: broken branch")

// TurnRecord is a finished turn as the session store keeps it, so a redelivered
// idempotency key is answered, not run, long after its workflow run ended.
type TurnRecord struct {
	Key      string          `json:"key"`
	Outcome  json.RawMessage `json:"outcome"` // agentloop.Outcome as JSON (carries First/Leaf)
	Finished time.Time       `json:"finished"`
	// Replaces, when set on a RecordTurn call, lets the record replace a
	// stored record of the key that finished before this instant: the key
	// ran again after its idempotency window. Not stored.
	Replaces time.Time `json:"-"`
}

// SessionInfo summarises one session.
type SessionInfo struct {
	Session string    `json:"session"`
	Entries int       `json:"entries"`
	Leaf    string    `json:"leaf"`
	Updated time.Time `json:"updated"`
	// Owner is the principal recorded as the session's owner ("" none);
	// Turns counts its recorded turns. ListSessions fills both.
	Owner string `json:"owner,omitempty"`
	Turns int    `json:"turns"`
}

// SessionQuery selects a page of ListSessions.
type SessionQuery struct {
	// Owner keeps only the sessions this principal owns; "" keeps all.
	Owner string
	// Limit bounds the page (0: DefaultSessionPage; at most MaxSessionPage).
	Limit int
	// Cursor is the previous page's NextCursor ("" the first page).
	Cursor string
	// Prefix keeps only the sessions whose ID starts with it (an agent's
	// sessions in a deployment of several: "<agent>/"); "" keeps all.
	Prefix string
	// Exclude leaves out the sessions whose ID starts with any of these
	// (the other agents' prefixes, when listing the main agent's).
	Exclude []string
}

// SessionPage is one page of ListSessions, most recently updated first.
type SessionPage struct {
	Sessions []SessionInfo `json:"sessions"`
	// NextCursor continues the listing; "" on the last page.
	NextCursor string `json:"nextCursor,omitempty"`
}

// Page sizes of ListSessions.
const (
	DefaultSessionPage = 50
	MaxSessionPage     = 500
)

// Store is a session store. Implementations are safe for concurrent use by
// several goroutines and several processes.
type Store interface {
	// Append writes entries in order. An entry whose ID already exists in the
	// session is left unchanged (the append is then a no-op for it), which
	// makes retried appends safe.
	Append(ctx context.Context, session string, entries ...transcript.Entry) error
	// Get returns one entry, or ErrNotFound.
	Get(ctx context.Context, session, id string) (transcript.Entry, error)
	// Branch returns the path from the root to leafID, root first. An empty
	// leafID yields an empty branch; an unknown one yields ErrNotFound.
	Branch(ctx context.Context, session, leafID string) ([]transcript.Entry, error)
	// Entries returns every entry of the session in append order.
	Entries(ctx context.Context, session string) ([]transcript.Entry, error)
	// Leaf returns the ID of the most recently appended entry, "" when the
	// session has none.
	Leaf(ctx context.Context, session string) (string, error)
	// Sessions lists sessions, most recently updated first.
	Sessions(ctx context.Context) ([]SessionInfo, error)
	// ListSessions lists a page of sessions, most recently updated first,
	// with their owners and recorded turn counts. A bad cursor is an error.
	ListSessions(ctx context.Context, q SessionQuery) (SessionPage, error)
	// RecordTurn keeps a finished turn under its idempotency key. The first
	// write for a key wins and a retried write is a no-op, except that a
	// record with Replaces set replaces a stored one that finished before
	// Replaces; the replacement is then the session's last turn.
	RecordTurn(ctx context.Context, session string, rec TurnRecord) error
	// Turn returns the record of key, or ErrNotFound.
	Turn(ctx context.Context, session, key string) (TurnRecord, error)
	// LastTurn returns the most recently recorded turn, or ErrNotFound.
	LastTurn(ctx context.Context, session string) (TurnRecord, error)
	// SetHead records leaf as the session's head: the entry a new workflow
	// chain of the session continues from (set by every recorded turn, a
	// rewind and a manual compaction). The last write wins.
	SetHead(ctx context.Context, session, leaf string) error
	// Head returns the session's head, or ErrNotFound.
	Head(ctx context.Context, session string) (string, error)
	// ClaimSession records principal as the owner of session unless an
	// owner is recorded, and returns the owner recorded afterwards: of two
	// principals racing for one session, exactly one owns it.
	ClaimSession(ctx context.Context, session, principal string) (string, error)
	// SessionOwner returns the recorded owner of session, or ErrNotFound.
	SessionOwner(ctx context.Context, session string) (string, error)
	// SaveReply records ref, the platform's identity of the message that
	// answers turn (for example a Slack channel and ts), unless one is
	// recorded; the first write wins and a retried write is a no-op.
	SaveReply(ctx context.Context, session, turn, ref string) error
	// Reply returns the recorded reply of turn, or ErrNotFound.
	Reply(ctx context.Context, session, turn string) (string, error)
	// Remember stores m under MemoryID(m.Agent, key) (its ID and Created
	// are set here) unless that memory exists, and returns the stored one:
	// a retried call stores nothing twice.
	Remember(ctx context.Context, m Memory, key string) (Memory, error)
	// Recall returns the memories in q's scope, the most relevant to q.Text
	// first (newest first without text).
	Recall(ctx context.Context, q MemoryQuery) ([]Memory, error)
	// Forget deletes memory id if it is in scope and returns it; one out of
	// scope or missing is ErrNotFound.
	Forget(ctx context.Context, scope MemoryScope, id string) (Memory, error)
	// DeleteSession removes what is kept of session's conversation — its
	// entries (images included), turn records, replies and head — in one
	// transaction, and returns how many entries it removed; a session the
	// store does not hold removes nothing and is not an error. The owner
	// is kept: the ID stays its owner's, so nobody else can start a
	// session under a deleted one's name.
	DeleteSession(ctx context.Context, session string) (int64, error)
	// SubSessions lists the sessions the store holds whose IDs start with
	// session + "/" (a sub-agent's sessions have such IDs; callers decide
	// which of them are).
	SubSessions(ctx context.Context, session string) ([]string, error)
	// Close releases the store's connections.
	Close() error
}

// sessionTables are the tables keyed by session that DeleteSession clears
// (owners stay, and memories, which are the principal's).
var sessionTables = []string{"entries", "turns", "replies", "heads"}

// notFound wraps ErrNotFound with the entry and session it is about.
func notFound(session, id string) error {
	return fmt.Errorf("%w: entry %q in session %q", ErrNotFound, id, session)
}

// encodeAll validates an Append call and encodes its entries, before any
// database work, so a bad entry leaves the store untouched.
func encodeAll(session string, entries []transcript.Entry) ([][]byte, error) {
	if session == "" {
		return nil, errors.New("store: append: empty session")
	}
	data := make([][]byte, len(entries))
	for i, e := range entries {
		b, err := EncodeEntry(e)
		if err != nil {
			return nil, fmt.Errorf("store: append to session %q: %w", session, err)
		}
		data[i] = b
	}
	return data, nil
}

// rowScanner is what the drivers' result sets have in common.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// scanEntries decodes the data column of every row, in order.
func scanEntries(session string, rows rowScanner) ([]transcript.Entry, error) {
	defer rows.Close()
	out := []transcript.Entry{}
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("store: entries of session %q: %w", session, err)
		}
		e, err := DecodeEntry([]byte(data))
		if err != nil {
			return nil, fmt.Errorf("store: entries of session %q: %w", session, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: entries of session %q: %w", session, err)
	}
	return out, nil
}

// scanBranch reads the rows of a branch walk: (data, entry count of the
// session), root first. No rows means the leaf does not exist; more rows than
// the session has entries means the parent links form a cycle. keep, when
// not nil, is given each decoded entry and the size of its stored JSON.
func scanBranch(session, leafID string, rows rowScanner, keep func(transcript.Entry, int)) ([]transcript.Entry, error) {
	defer rows.Close()
	out := []transcript.Entry{}
	var limit int64
	for rows.Next() {
		var data string
		if err := rows.Scan(&data, &limit); err != nil {
			return nil, fmt.Errorf("store: branch %q in session %q: %w", leafID, session, err)
		}
		e, err := DecodeEntry([]byte(data))
		if err != nil {
			return nil, fmt.Errorf("store: branch %q in session %q: %w", leafID, session, err)
		}
		if keep != nil {
			keep(e, len(data))
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: branch %q in session %q: %w", leafID, session, err)
	}
	if len(out) == 0 {
		return nil, notFound(session, leafID)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("store: branch %q in session %q: parent links form a cycle", leafID, session)
	}
	if root := out[0]; root.ParentID != "" {
		return nil, fmt.Errorf("%w: branch %q in session %q: entry %q names parent %q, which the session does not hold",
			ErrBrokenBranch, leafID, session, root.ID, root.ParentID)
	}
	return out, nil
}

// validTurn checks a RecordTurn call before any database work.
func validTurn(session string, rec TurnRecord) error {
	switch {
	case session == "":
		return errors.New("store: record turn: empty session")
	case rec.Key == "":
		return fmt.Errorf("store: record turn in session %q: empty key", session)
	case !json.Valid(rec.Outcome):
		return fmt.Errorf("store: record turn %q in session %q: outcome is not valid JSON", rec.Key, session)
	}
	return nil
}

// turnNotFound wraps ErrNotFound with the key and session it is about.
func turnNotFound(session, key string) error {
	if key == "" {
		return fmt.Errorf("%w: no recorded turn in session %q", ErrNotFound, session)
	}
	return fmt.Errorf("%w: turn %q in session %q", ErrNotFound, key, session)
}

// sessionsQuery lists sessions of table, most recently appended first:
// (session, entry count, leaf ID, created_at of the leaf). It is valid SQL
// for both SQLite and Postgres.
func sessionsQuery(table string) string {
	return `
SELECT session, n, id, created_at FROM (
	SELECT session, id, seq, created_at,
		COUNT(*) OVER (PARTITION BY session) AS n,
		ROW_NUMBER() OVER (PARTITION BY session ORDER BY seq DESC) AS rn
	FROM ` + table + `
) t WHERE rn = 1 ORDER BY seq DESC`
}

// validClaim checks a ClaimSession call before any database work.
func validClaim(session, principal string) error {
	switch {
	case session == "":
		return errors.New("store: claim session: empty session")
	case principal == "":
		return fmt.Errorf("store: claim session %q: empty principal", session)
	}
	return nil
}

// validHead checks a SetHead call before any database work.
func validHead(session, leaf string) error {
	switch {
	case session == "":
		return errors.New("store: set head: empty session")
	case leaf == "":
		return fmt.Errorf("store: set head of session %q: empty leaf", session)
	}
	return nil
}

// headNotFound wraps ErrNotFound with the session it is about.
func headNotFound(session string) error {
	return fmt.Errorf("%w: no head recorded for session %q", ErrNotFound, session)
}

// ownerNotFound wraps ErrNotFound with the session it is about.
func ownerNotFound(session string) error {
	return fmt.Errorf("%w: no owner recorded for session %q", ErrNotFound, session)
}

// validReply checks a SaveReply call before any database work.
func validReply(session, turn, ref string) error {
	switch {
	case session == "":
		return errors.New("store: save reply: empty session")
	case turn == "":
		return fmt.Errorf("store: save reply in session %q: empty turn", session)
	case ref == "":
		return fmt.Errorf("store: save reply of turn %q in session %q: empty reference", turn, session)
	}
	return nil
}

// replyNotFound wraps ErrNotFound with the turn and session it is about.
func replyNotFound(session, turn string) error {
	return fmt.Errorf("%w: no reply recorded for turn %q in session %q", ErrNotFound, turn, session)
}

// listQuery is the ListSessions query for a driver: entries, turns and
// owners tables, and ph(n) the driver's n-th placeholder. Parameters:
// owner (twice), cursor seq (twice; 0 = from the newest), limit + 1.
func listQuery(entries, turns, owners string, q SessionQuery, ph func(n int, typ string) string) string {
	where := `t.rn = 1 AND (` + ph(1, "text") + ` = '' OR o.principal = ` + ph(2, "text") + `)
	AND (` + ph(3, "bigint") + ` = 0 OR t.seq < ` + ph(4, "bigint") + `)
	AND substr(t.session, 1, length(` + ph(5, "text") + `)) = ` + ph(6, "text")
	n := 7
	for range q.Exclude {
		where += `
	AND substr(t.session, 1, length(` + ph(n, "text") + `)) <> ` + ph(n+1, "text")
		n += 2
	}
	return `
SELECT t.session, t.n, t.id, t.created_at, t.seq, COALESCE(o.principal, ''),
	(SELECT COUNT(*) FROM ` + turns + ` tr WHERE tr.session = t.session)
FROM (
	SELECT session, id, seq, created_at,
		COUNT(*) OVER (PARTITION BY session) AS n,
		ROW_NUMBER() OVER (PARTITION BY session ORDER BY seq DESC) AS rn
	FROM ` + entries + `
) t LEFT JOIN ` + owners + ` o ON o.session = t.session
WHERE ` + where + `
ORDER BY t.seq DESC LIMIT ` + ph(n, "bigint")
}

// listArgs validates q and returns listQuery's parameters and the page size.
func listArgs(q SessionQuery) ([]any, int, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultSessionPage
	case limit < 0 || limit > MaxSessionPage:
		return nil, 0, fmt.Errorf("store: list sessions: limit %d is outside 1..%d", limit, MaxSessionPage)
	}
	var after int64
	if q.Cursor != "" {
		n, err := strconv.ParseInt(q.Cursor, 36, 64)
		if err != nil || n <= 0 {
			return nil, 0, fmt.Errorf("%w: %q is not a cursor this store returned", ErrBadCursor, q.Cursor)
		}
		after = n
	}
	args := []any{q.Owner, q.Owner, after, after, q.Prefix, q.Prefix}
	for _, e := range q.Exclude {
		if e == "" {
			return nil, 0, errors.New("store: list sessions: an empty prefix to exclude would exclude every session")
		}
		args = append(args, e, e)
	}
	return append(args, limit+1), limit, nil
}

// ErrBadCursor is returned by ListSessions for a cursor it did not issue.
var ErrBadCursor = errors.New("store: bad cursor")

// listRow is one scanned row of listQuery with its seq.
type listRow struct {
	info SessionInfo
	seq  int64
}

// pageOf cuts the scanned rows (limit + 1 at most) into a page.
func pageOf(rows []listRow, limit int) SessionPage {
	p := SessionPage{Sessions: []SessionInfo{}}
	for i, r := range rows {
		if i == limit {
			p.NextCursor = strconv.FormatInt(rows[i-1].seq, 36)
			break
		}
		p.Sessions = append(p.Sessions, r.info)
	}
	return p
}

// scanNames reads one text column of every row (SubSessions).
func scanNames(session string, rows rowScanner) ([]string, error) {
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("store: sub-sessions of %q: %w", session, err)
		}
		out = append(out, name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: sub-sessions of %q: %w", session, err)
	}
	return out, nil
}
