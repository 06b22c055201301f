package sidecar

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

// h2Upgrade is Istio's shouldH2Upgrade: useClientProtocol wins, then the
// DestinationRule's policy, then the mesh's for HTTP ports only.
func TestH2Upgrade(t *testing.T) {
	pool := func(p networking.ConnectionPoolSettings_HTTPSettings_H2UpgradePolicy, client bool) *networking.ConnectionPoolSettings {
		return &networking.ConnectionPoolSettings{Http: &networking.ConnectionPoolSettings_HTTPSettings{H2UpgradePolicy: p, UseClientProtocol: client}}
	}
	const (
		def     = networking.ConnectionPoolSettings_HTTPSettings_DEFAULT
		upgrade = networking.ConnectionPoolSettings_HTTPSettings_UPGRADE
		never   = networking.ConnectionPoolSettings_HTTPSettings_DO_NOT_UPGRADE
	)
	for _, tc := range []struct {
		name     string
		protocol string
		cp       *networking.ConnectionPoolSettings
		mesh     bool
		want     bool
	}{
		{"nothing set", "HTTP", nil, false, false},
		{"mesh upgrade", "HTTP", nil, true, true},
		{"mesh upgrade, TCP port", "TCP", nil, true, false},
		{"rule says no", "HTTP", pool(never, false), true, false},
		{"rule says upgrade", "HTTP", pool(upgrade, false), false, true},
		{"rule default follows the mesh", "HTTP", pool(def, false), true, true},
		{"client protocol wins", "HTTP", pool(upgrade, true), true, false},
	} {
		if got := h2Upgrade(tc.protocol, tc.cp, tc.mesh); got != tc.want {
			t.Errorf("%s: h2Upgrade = %v, want %v", tc.name, got, tc.want)
		}
	}
}
