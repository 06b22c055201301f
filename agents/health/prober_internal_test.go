package health

import (
	"context"
	"testing"
)

// A prober made without a probe has nothing to say until SetProbe: the
// agent reports "waiting for WorkloadGroup" and a pending change would
// make Run report the workload healthy first.
func TestNewProberWithoutProbeSignalsNothing(t *testing.T) {
	pr, err := NewProber(nil, "", ReporterFunc(func(context.Context, Status) error { return nil }), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(pr.changed); n != 0 {
		t.Fatalf("%d change(s) pending after NewProber(nil): Run would report healthy before any probe was set", n)
	}
	if err := pr.SetProbe(nil); err != nil {
		t.Fatal(err)
	}
	if n := len(pr.changed); n != 1 {
		t.Fatalf("SetProbe(nil) left %d change(s) pending, want 1 (the workload is then reported healthy)", n)
	}
}
