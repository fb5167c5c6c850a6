package serve

import (
	"slices"
	"strings"
	"testing"
)

// Every form of the store and feed addresses is in the tools' control
// plane: URLs, PostgreSQL key=value DSNs (host= and hostaddr=, several
// hosts) and NATS server lists; the in-process feed names no host.
func TestControlPlaneNamesEveryStoreAndFeedHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		store, feed string
		want        []string
	}{
		{store: "postgres://u:pw@db.internal:5433/fa", feed: "nats://n1:4222", want: []string{"db.internal:5433", "n1:4222"}},
		{store: "host=db1.internal port=6432 user=fa password=pw dbname=fa", want: []string{"db1.internal:6432"}},
		{store: "host=db1,db2 port=5432,5433 hostaddr=10.9.8.7 user=fa", want: []string{"db1:5432", "db2:5433", "10.9.8.7:5432"}},
		{store: "host='db 3' user=fa", want: []string{"db 3:5432"}},
		{feed: "nats://t@n1:4222,nats://n2:4223,n3:4224", want: []string{"n1:4222", "n2:4223", "n3:4224"}},
		{store: "/var/lib/fastagent/sessions.db", want: nil},
		{feed: "inprocess", want: nil},
	} {
		p := &Parts{Config: Config{Store: tc.store, Feed: tc.feed, HTTPPort: 8787}}
		got := p.controlPlane()
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("store %q feed %q: control plane %q lacks %q", tc.store, tc.feed, got, w)
			}
		}
		if slices.ContainsFunc(got, func(a string) bool { return strings.Contains(a, "inprocess") }) {
			t.Errorf("feed %q: control plane %q names the in-process feed as a host (it has none; resolving it fails)", tc.feed, got)
		}
	}
}
