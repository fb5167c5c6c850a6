package store

import (
	"context"
	"fmt"
	"strings"
)

// Open opens the store named by dsn, choosing the driver from its form:
//
//   - "postgres://…" or "postgresql://…", or a key=value connection string
//     ("host=db user=fa passfile=…"): Postgres (see OpenPostgres);
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
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"), keyValueDSN(dsn):
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

const acceptedDSNs = `accepted: "postgres://…", "postgresql://…", "host=… dbname=…", "sqlite:///abs/path.db" or a file path`

// keyValueDSN reports whether dsn is a libpq key=value connection string:
// it starts with a libpq keyword and "=". Taken for a file path, it would
// become a SQLite file named after it — password included — in the working
// directory.
func keyValueDSN(dsn string) bool {
	key, _, ok := strings.Cut(strings.TrimSpace(dsn), "=")
	return ok && libpqKeywords[strings.ToLower(strings.TrimSpace(key))]
}

var libpqKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "password": true, "passfile": true,
	"connect_timeout": true, "client_encoding": true, "options": true, "application_name": true,
	"fallback_application_name": true, "keepalives": true, "sslmode": true, "sslcert": true, "sslkey": true,
	"sslrootcert": true, "sslpassword": true, "service": true, "target_session_attrs": true, "channel_binding": true,
	"require_auth": true, "sslnegotiation": true,
}

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
