package worker_test

import (
	"testing"

	"github.com/fastagent/fastagent/internal/testsupport/exampleenv"
)

// The examples and tests reach a Temporal development server.
func TestMain(m *testing.M) { exampleenv.Main(m) }

var (
	temporalOptions = exampleenv.ClientOptions
	exampleAgent    = exampleenv.Agent
	quiet           = exampleenv.Quiet
)
