package workspace

import (
	"strconv"

	"github.com/fastagent/fastagent/internal/delivery"
)

// DeliveryConfig is fastagent.yaml's delivery: block: where the agent's
// send_message and send_file tools may send (docs/delivery.md).
type DeliveryConfig struct {
	// Allow lists the targets the tools may send to: "slack:#ops",
	// "github:owner/repo#12", or every target of a kind, "telegram:*".
	// Unset or empty, the agent has no send tools.
	Allow []string `yaml:"allow"`
}

// Enabled reports whether the agent has the send tools.
func (d DeliveryConfig) Enabled() bool { return len(d.Allow) > 0 }

// Allowed is the allow list normalized (delivery.ParseAllow); nil when it
// does not parse (validate refuses such a file).
func (d DeliveryConfig) Allowed() []string {
	out, err := delivery.ParseAllow(d.Allow)
	if err != nil {
		return nil
	}
	return out
}

func (d DeliveryConfig) validate() error {
	for i, e := range d.Allow {
		if _, err := delivery.ParseAllow([]string{e}); err != nil {
			return badKey(err.Error(), "delivery", "allow", strconv.Itoa(i))
		}
	}
	return nil
}
