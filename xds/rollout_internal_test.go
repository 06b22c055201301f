package xds

import (
	"fmt"
	"testing"
)

// Canaries by percent: about that share of the proxies, the same ones
// every time; by selector: exactly the proxies whose labels include it.
func TestRolloutCanaries(t *testing.T) {
	r := &rollout{opts: RolloutOptions{Percent: 20}}
	n := 0
	for i := range 1000 {
		p := &Proxy{ID: fmt.Sprintf("app-%d.default", i)}
		c := r.isCanary(p)
		if c != r.isCanary(p) {
			t.Fatalf("%s: not the same answer twice", p.ID)
		}
		if c {
			n++
		}
	}
	if n < 150 || n > 250 {
		t.Errorf("20%% of 1000 proxies: %d canaries", n)
	}
	r = &rollout{opts: RolloutOptions{Selector: map[string]string{"rollout": "canary", "app": "cart"}}}
	for _, tc := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"rollout": "canary", "app": "cart", "version": "v2"}, true},
		{map[string]string{"rollout": "canary"}, false},
		{map[string]string{"rollout": "stable", "app": "cart"}, false},
		{nil, false},
	} {
		if got := r.isCanary(&Proxy{ID: "x", Labels: tc.labels}); got != tc.want {
			t.Errorf("labels %v: canary %v, want %v", tc.labels, got, tc.want)
		}
	}
}
