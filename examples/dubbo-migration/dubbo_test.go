// Package dubbomigration holds the Dubbo migration example; its test runs
// the example's script, which checks its own output.
package dubbomigration

import (
	"testing"

	"github.com/vmesh/vmesh/examples/internal/scripttest"
)

// TestDubboMigrationExample runs run.sh: Dubbo providers registered in a
// real ZooKeeper reached through vmesh, a VirtualService moving their
// consumers 90/10 then wholly to 2.0.0, and the 1.0.0 providers leaving.
func TestDubboMigrationExample(t *testing.T) { scripttest.Run(t, "run.sh") }
