package store

import (
	"context"
	"sync"

	"github.com/fastagent/fastagent/transcript"
)

// DefaultEntryCacheBytes bounds the decoded entries a store keeps in memory
// (counted by their stored JSON): enough for the recent context of a few
// hundred active sessions.
const DefaultEntryCacheBytes = 16 << 20

// entryCache keeps decoded entries by (session, ID) for the drivers' Get
// and Branch, so that a model step reads its context from memory instead of
// walking the parent links in the database and decoding every entry again.
//
// Entries never change once stored (an append of an existing ID is a
// no-op), so a cached entry is never stale, whichever process appended it
// — until DeleteSession removes its session: that process drops the
// session's entries (forget); another process may still answer a read of
// a deleted entry by its old ID until the entry is evicted (a new session
// under the same name has new entry IDs, so its turns never read them). Only what the database holds is cached:
// what a read returned, and what an append inserted (its committed rows;
// an ID that already existed is left to the next read). Misses are never
// cached.
//
// It is bounded in two generations: new entries go to the young one; when
// it reaches half the budget it becomes the old one and the previous old
// one is dropped; a hit in the old generation moves back to the young one.
// A nil *entryCache caches nothing.
type entryCache struct {
	mu       sync.Mutex
	half     int // bytes per generation
	young    map[entryKey]cached
	old      map[entryKey]cached
	youngLen int
}

type entryKey struct{ session, id string }

type cached struct {
	e    transcript.Entry
	size int
}

// entryOverhead approximates the bookkeeping bytes of one cached entry
// beside its stored JSON.
const entryOverhead = 256

func newEntryCache(bytes int) *entryCache {
	if bytes <= 0 {
		return nil
	}
	return &entryCache{half: bytes / 2, young: map[entryKey]cached{}}
}

// get returns a copy of the cached entry, if any.
func (c *entryCache) get(session, id string) (transcript.Entry, bool) {
	if c == nil {
		return transcript.Entry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lookup(entryKey{session, id})
	if !ok {
		return transcript.Entry{}, false
	}
	return cloneEntry(e), true
}

// lookup finds k, moving an old-generation hit to the young one. c.mu held.
func (c *entryCache) lookup(k entryKey) (transcript.Entry, bool) {
	if v, ok := c.young[k]; ok {
		return v.e, true
	}
	v, ok := c.old[k]
	if !ok {
		return transcript.Entry{}, false
	}
	delete(c.old, k)
	c.insert(k, v)
	return v.e, true
}

// forget drops every cached entry of session (DeleteSession).
func (c *entryCache) forget(session string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.young {
		if k.session == session {
			delete(c.young, k)
			c.youngLen -= v.size
		}
	}
	for k := range c.old {
		if k.session == session {
			delete(c.old, k)
		}
	}
}

// put caches e (as stored: decoded from the database's bytes), of stored
// size bytes.
func (c *entryCache) put(session string, e transcript.Entry, size int) {
	if c == nil || e.ID == "" {
		return
	}
	size += entryOverhead + len(session) + len(e.ID)
	if size > c.half {
		return // larger than a generation: not worth evicting everything for
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := entryKey{session, e.ID}
	if _, ok := c.young[k]; ok {
		return
	}
	delete(c.old, k)
	c.insert(k, cached{e: e, size: size})
}

// insert adds v to the young generation, turning it old when full. c.mu held.
func (c *entryCache) insert(k entryKey, v cached) {
	if c.youngLen+v.size > c.half {
		c.old, c.young, c.youngLen = c.young, map[entryKey]cached{}, 0
	}
	c.young[k] = v
	c.youngLen += v.size
}

// branch walks the parent links from leaf in the cache, root first, and
// reports whether the whole branch was cached. Up to maxMisses entries
// missing on the way are read with get (a point read each) and cached; a
// further miss, a failed read or a link that comes back to an entry
// already walked (a cycle, which the database's walk reports) ends the
// attempt, and the caller walks the branch in the database.
func (c *entryCache) branch(ctx context.Context, session, leaf string, get func(ctx context.Context, session, id string) (transcript.Entry, error)) ([]transcript.Entry, bool) {
	if c == nil {
		return nil, false
	}
	const maxMisses = 2
	var (
		rev    []transcript.Entry
		seen   = map[string]bool{}
		misses int
	)
	for id := leaf; id != ""; {
		if seen[id] {
			return nil, false
		}
		seen[id] = true
		e, ok := c.get(session, id)
		if !ok {
			if misses++; misses > maxMisses {
				return nil, false
			}
			var err error
			if e, err = get(ctx, session, id); err != nil {
				return nil, false
			}
		}
		rev = append(rev, e)
		id = e.ParentID
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev, true
}

// cloneEntry copies e deep enough that a caller changing the returned
// entry's messages, lists or pointees cannot change the cached one (raw
// JSON values are shared: nothing writes into them).
func cloneEntry(e transcript.Entry) transcript.Entry {
	if e.Message != nil {
		m := *e.Message
		if m.Images != nil {
			m.Images = append([]transcript.Image(nil), m.Images...)
		}
		if m.ToolCalls != nil {
			m.ToolCalls = append([]transcript.ToolCall(nil), m.ToolCalls...)
		}
		if m.AddedToolNames != nil {
			m.AddedToolNames = append([]string(nil), m.AddedToolNames...)
		}
		if m.Usage != nil {
			u := *m.Usage
			m.Usage = &u
		}
		e.Message = &m
	}
	if e.Compaction != nil {
		c := *e.Compaction
		e.Compaction = &c
	}
	if e.BranchSummary != nil {
		b := *e.BranchSummary
		e.BranchSummary = &b
	}
	if e.Custom != nil {
		c := *e.Custom
		e.Custom = &c
	}
	return e
}

// decoded decodes an entry read from the database and caches it.
func (c *entryCache) decoded(session, data string) (transcript.Entry, error) {
	e, err := DecodeEntry([]byte(data))
	if err != nil {
		return transcript.Entry{}, err
	}
	if c != nil {
		c.put(session, e, len(data))
		e = cloneEntry(e)
	}
	return e, nil
}

// appended caches the entries an append inserted (inserted[i]: data[i]
// was a new row, committed), decoded from their stored bytes as a read
// would return them.
func (c *entryCache) appended(session string, data [][]byte, inserted []bool) {
	if c == nil {
		return
	}
	for i, ok := range inserted {
		if !ok {
			continue
		}
		if e, err := DecodeEntry(data[i]); err == nil {
			c.put(session, e, len(data[i]))
		}
	}
}

// scanned reads a branch walk's rows (scanBranch) and caches its entries.
func (c *entryCache) scanned(session, leafID string, rows rowScanner) ([]transcript.Entry, error) {
	if c == nil {
		return scanBranch(session, leafID, rows, nil)
	}
	// Entries are cached only once the whole walk is known to be sound.
	var sizes []int
	b, err := scanBranch(session, leafID, rows, func(_ transcript.Entry, size int) { sizes = append(sizes, size) })
	if err != nil {
		return nil, err
	}
	for i, e := range b {
		c.put(session, e, sizes[i])
		b[i] = cloneEntry(e)
	}
	return b, nil
}
