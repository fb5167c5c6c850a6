package main

import (
	"strings"
	"testing"
)

// `fastagent worker --activities` takes the groups that run apart (model,
// tools) and refuses anything else before it opens or dials anything.
func TestWorkerActivitiesRefusesBadGroups(t *testing.T) {
	dir := initWorkspace(t)
	other := initWorkspace(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"worker", "--activities", "gpus"}, `"gpus" is not an activity group (model, tools`},
		{[]string{"worker", "--activities", "tools,session"}, "only the model and tools groups"},
		{[]string{"worker", "--activities", "tools", "--agent", "helper=" + other}, "drop --agent"},
		// Apart from the sessions, the in-process feed would lose the
		// group's live events and aborts.
		{[]string{"worker", "--activities", "tools"}, "NATS feed"},
		{[]string{"worker", "--activities", "model", "--feed", "inprocess"}, "NATS feed"},
	} {
		_, errOut, code := execute(t, "", append([]string{"-C", dir}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want %d (usage) saying %q:\n%s", c.args, code, exitUsage, c.want, errOut)
		}
	}
}
