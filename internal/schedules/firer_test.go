package schedules

import (
	"path/filepath"
	"testing"

	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/store"
)

// A fire's turn can fill in from the session store what the live feed lost
// (a worker killed mid-stream): the firer's agent reads the store.
func TestFirerAgentReadsTheStore(t *testing.T) {
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Made without a client, the firer makes its agent on the client of the
	// worker running the fire: that agent reads the store too.
	f := NewFirer(nil, nil, st, "q", nil)
	a, ok := f.agentOn(nil).(*durable.Agent)
	if !ok || a.Store != st || a.TaskQueue != "q" {
		t.Fatalf("the firer's agent has no session store (%T)", f.Agent)
	}
}
