package ingress_test

import (
	"testing"

	"github.com/fastagent/fastagent/internal/testsupport/exampleenv"
)

// The example reaches a Temporal development server.
func TestMain(m *testing.M) { exampleenv.Main(m) }

var (
	temporalOptions = exampleenv.ClientOptions
	exampleAgent    = exampleenv.Agent
	quiet           = exampleenv.Quiet
)
