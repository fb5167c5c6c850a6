package store

// WithoutEntryCache turns s's entry cache off, for benchmarks comparing
// reads with and without it.
func WithoutEntryCache(s *SQLite) { s.cache = nil }
