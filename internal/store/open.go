package store

import (
	"context"
	"fmt"
	"strings"
)

// Open opens the store named by dsn, choosing the driver from its form:
//
//   - "postgres://…" or "postgresql://…": Postgres (see OpenPostgres);
//   - "sqlite:///abs/path.db", "sqlite://rel/path.db" or "sqlite:path.db":
//     SQLite at that path;
//   - a plain file path ("./data/fastagent.db", "/var/lib/fa.db"): SQLite.
//
// Anything else (an empty string, another URL scheme) is an error.
func Open(ctx context.Context, dsn string) (Store, error) {
	lower := strings.ToLower(dsn)
	switch {
	case dsn == "":
		return nil, fmt.Errorf("store: open: empty dsn (%s)", acceptedDSNs)
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		p, err := OpenPostgres(ctx, dsn)
		if err != nil {
			return nil, err
		}
		return p, nil
	case strings.HasPrefix(lower, "sqlite://"):
		return openSQLiteDSN(dsn, dsn[len("sqlite://"):]) //nolint:contextcheck // opening a local file: nothing to cancel
	case strings.HasPrefix(lower, "sqlite:"):
		return openSQLiteDSN(dsn, dsn[len("sqlite:"):]) //nolint:contextcheck // opening a local file: nothing to cancel
	case strings.Contains(dsn, "://"):
		scheme, _, _ := strings.Cut(dsn, "://")
		return nil, fmt.Errorf("store: open: unsupported scheme %q (%s)", scheme, acceptedDSNs)
	default:
		return openSQLiteDSN(dsn, dsn) //nolint:contextcheck // opening a local file: nothing to cancel
	}
}

const acceptedDSNs = `accepted: "postgres://…", "postgresql://…", "sqlite:///abs/path.db" or a file path`

func openSQLiteDSN(dsn, path string) (Store, error) {
	if path == "" {
		return nil, fmt.Errorf("store: open %q: missing sqlite file path (%s)", dsn, acceptedDSNs)
	}
	s, err := OpenSQLite(path)
	if err != nil {
		return nil, err
	}
	return s, nil
}
