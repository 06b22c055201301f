package sidecar

import (
	"testing"

	"github.com/vmesh/vmesh/model"
)

// TestOwnsEndpoint: an endpoint is the workload's by one of its IPs or by
// the WorkloadEntry <namespace>/<workload name>, and by nothing that only
// looks like that name.
func TestOwnsEndpoint(t *testing.T) {
	w := model.Workload{Namespace: "ns-1", WorkloadName: "vm-7", IPs: []string{"10.0.0.7", "fd00::7"}}
	for _, c := range []struct {
		origin, address string
		want            bool
	}{
		{"ns-1/vm-7", "10.9.9.9", true},
		{"", "fd00::7", true},
		{"ns-1/vm-77", "10.9.9.9", false},
		{"ns-11/vm-7", "10.9.9.9", false},
		{"ns-1-vm-7", "10.9.9.9", false},
		{"ns-1/vm", "10.9.9.9", false},
		{"ns-2/vm-7", "10.0.0.70", false},
	} {
		if got := OwnsEndpoint(w, &model.Endpoint{Origin: c.origin, Address: c.address}); got != c.want {
			t.Errorf("origin %q address %q: owns %v, want %v", c.origin, c.address, got, c.want)
		}
	}
	if OwnsEndpoint(model.Workload{Namespace: "ns-1", IPs: []string{"10.0.0.7"}}, &model.Endpoint{Origin: "ns-1/"}) {
		t.Error("a workload without a name owns the entry \"ns-1/\"")
	}
}
