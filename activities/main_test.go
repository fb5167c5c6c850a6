package activities_test

import (
	"testing"

	"github.com/fastagent/fastagent/internal/testsupport/exampleenv"
)

// The examples reach a Temporal development server.
func TestMain(m *testing.M) { exampleenv.Main(m) }
