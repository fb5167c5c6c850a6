package workspace

import (
	"testing"

	"github.com/fastagent/fastagent/internal/delivery"
)

// The send tools exist only when delivery.allow lists targets, and read
// files with the agent's protected list.
func TestDeliveryTools(t *testing.T) {
	t.Parallel()
	without := load(t, map[string]string{ConfigFile: "model: openai/gpt-4o-mini\n"}, nil)
	if _, ok := without.Tool(delivery.SendMessageName); ok {
		t.Error("send_message exists without delivery.allow")
	}
	with := load(t, map[string]string{ConfigFile: "model: openai/gpt-4o-mini\ndelivery:\n  allow: [\"slack:#Ops\", \"telegram:*\"]\n"}, nil)
	specs := with.ActiveSpecs(nil)
	if !hasSpec(specs, delivery.SendMessageName) || !hasSpec(specs, delivery.SendFileName) {
		t.Fatalf("specs lack the send tools: %v", specs)
	}
	if got := with.Config.Delivery.Allowed(); len(got) != 2 || got[0] != "slack:#ops" || got[1] != "telegram:*" {
		t.Errorf("allowed = %v", got)
	}
}
