package agent_test

import (
	"testing"
	"time"

	"github.com/vmesh/vmesh/agents/xdsproxy"
	"github.com/vmesh/vmesh/internal/testenv"
)

// TestNotifiesSystemd: under a Type=notify unit the agent says READY=1 once
// it has its certificate and serves xDS and SDS, and STOPPING=1 on its way
// out, on a real unixgram socket as systemd's.
func TestNotifiesSystemd(t *testing.T) {
	sd := testenv.NotifySocket(t)
	r := start(t, nil) // returns once Ready() is closed
	if got := sd.Next(t, 10*time.Second); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	r.next(t, xdsproxy.HealthInfoType) // the agent's own xDS stream is up
	r.cancel()
	if got := sd.Next(t, 10*time.Second); got != "STOPPING=1" {
		t.Fatalf("notification on shutdown %q, want STOPPING=1", got)
	}
}
