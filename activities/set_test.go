package activities

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"

	iacts "github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

type firer struct{}

func (firer) Fire(context.Context, wire.FireRequest) (workflows.FireRecord, error) {
	return workflows.FireRecord{}, nil
}

func testSet() *Set {
	s, err := newSet(iacts.Set{Acts: &iacts.Activities{}, Replies: &iacts.Replies{}, Firer: firer{}}, nil)
	if err != nil {
		panic(err)
	}
	return s
}

type registry struct{ names []string }

func (r *registry) RegisterActivityWithOptions(_ any, o activity.RegisterOptions) {
	r.names = append(r.names, o.Name)
}

// Register registers a group alone, or every group; an unknown group or
// a set not made by New is an error.
func TestRegisterGroups(t *testing.T) {
	s := testSet()
	var tools registry
	if err := Register(&tools, s, GroupTools); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tools.names, []string{workflows.ActivityToolExecute, workflows.ActivityHookRun}) {
		t.Errorf("the tools group registered %v", tools.names)
	}
	var model registry
	if err := Register(&model, s, GroupModel); err != nil {
		t.Fatal(err)
	}
	// Step.Run runs tools too: never on a worker without the tools group.
	if !slices.Equal(model.names, []string{workflows.ActivityModelGenerate, workflows.ActivityCompact, workflows.ActivityRewind}) {
		t.Errorf("the model group registered %v", model.names)
	}
	var both registry
	if err := Register(&both, s, GroupModel, GroupTools); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(both.names, workflows.ActivityStepRun) {
		t.Errorf("the model and tools groups registered %v, want Step.Run among them", both.names)
	}
	var all registry
	if err := Register(&all, s); err != nil {
		t.Fatal(err)
	}
	if len(all.names) != 22 || !slices.Contains(all.names, workflows.ActivitySessionExpire) || !slices.Contains(all.names, workflows.ActivityChannelSend) || !slices.Contains(all.names, workflows.ActivityScheduleFire) || !slices.Contains(all.names, workflows.ActivityChatRoute) {
		t.Errorf("every group registered %d: %v", len(all.names), all.names)
	}
	if err := Register(&registry{}, s, Group("gpus")); err == nil || !strings.Contains(err.Error(), "tools") {
		t.Errorf("an unknown group: %v, want an error naming the groups", err)
	}
	if err := Register(&registry{}, &Set{}); err == nil {
		t.Error("a zero Set was registered")
	}
	if len(Groups()) != 5 {
		t.Errorf("Groups() = %v", Groups())
	}
}

// Register without a registry is an error saying what to pass, not a
// nil-pointer panic.
func TestRegisterWithoutARegistry(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Register(nil, …) panicked: %v", r)
		}
	}()
	if err := Register(nil, testSet(), GroupTools); err == nil || !strings.Contains(err.Error(), "worker") {
		t.Fatalf("Register(nil, …) = %v, want an error asking for a worker", err)
	}
}

// Register of the model or tools group alone, from a set whose feed was
// not named (the in-process default), is refused before anything is
// registered: the sessions in other processes would never see the
// group's events nor reach it with an abort.
func TestRegisterApartNeedsAFeed(t *testing.T) {
	s := testSet()
	s.parts, s.feed = &serve.Parts{}, ""
	for _, g := range []Group{GroupTools, GroupModel} {
		var r registry
		if err := Register(&r, s, g); err == nil || !strings.Contains(err.Error(), "abort") || len(r.names) != 0 {
			t.Errorf("Register of %s without a feed: %v, registered %v; want refused, nothing registered", g, err, r.names)
		}
	}
	var whole registry
	if err := Register(&whole, s); err != nil {
		t.Errorf("Register of every group (the sessions' own worker): %v", err)
	}
	s.feed = "inprocess"
	var tools registry
	if err := Register(&tools, s, GroupTools); err != nil || len(tools.names) != 2 { // Tool.Execute, Hook.Run
		t.Errorf("Register of tools, feed inprocess: %v, %v", err, tools.names)
	}
}
