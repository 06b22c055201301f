package retry_test

import (
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/retry"
)

// TestJitteredAndBounded: delays grow from the minimum to the maximum,
// each within ±20 % of its nominal value, and two loops started together
// do not retry in lockstep.
func TestJitteredAndBounded(t *testing.T) {
	a, b := retry.New(100*time.Millisecond, time.Second), retry.New(100*time.Millisecond, time.Second)
	nominal := 100 * time.Millisecond
	same := 0
	for i := range 10 {
		da, db := a.Next(), b.Next()
		lo, hi := time.Duration(float64(nominal)*0.8), time.Duration(float64(nominal)*1.2)+1
		if da < lo || da > hi {
			t.Fatalf("delay %d = %v, want within [%v, %v]", i, da, lo, hi)
		}
		if da == db {
			same++
		}
		nominal = min(2*nominal, time.Second)
	}
	if same > 2 {
		t.Errorf("%d of 10 delays identical across two loops: no jitter", same)
	}
	a.Reset()
	if d := a.Next(); d > 120*time.Millisecond {
		t.Errorf("after Reset: %v, want about the minimum", d)
	}
}
