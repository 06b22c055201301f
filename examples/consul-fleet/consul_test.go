// Package consulfleet holds the Consul fleet example; its test runs
// the example's script, which checks its own output.
package consulfleet

import (
	"testing"

	"github.com/vmesh/vmesh/examples/internal/scripttest"
)

// TestConsulFleetExample runs run.sh: instances registered in a real Consul
// dev agent with gRPC health checks, reached through vmesh with no YAML; a
// failing check takes one out of the split, a passing one brings it back, a
// deregistration removes one.
func TestConsulFleetExample(t *testing.T) { scripttest.Run(t, "run.sh") }
