package settle_test

import (
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/settle"
)

// TestWindowOneFirePerBurst: events closer together than the quiet period
// are one burst, which fires once after they stop.
func TestWindowOneFirePerBurst(t *testing.T) {
	w := settle.New(200*time.Millisecond, time.Hour)
	defer w.Stop()
	start := time.Now()
	for range 5 {
		w.Event(time.Now())
	}
	<-w.C()
	w.Done()
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("fired after %s, before the quiet period", waited)
	}
	select {
	case <-w.C():
		t.Error("a second fire for one burst")
	case <-time.After(300 * time.Millisecond):
	}
	if w.Pending() {
		t.Error("pending after Done")
	}
}

// TestWindowBoundedByMax: events that never stop for the quiet period still
// fire by max after the first.
func TestWindowBoundedByMax(t *testing.T) {
	w := settle.New(100*time.Millisecond, 300*time.Millisecond)
	defer w.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	w.Event(time.Now())
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-tick.C:
			w.Event(time.Now())
		case <-w.C():
			return
		case <-deadline:
			t.Fatal("never fired under continuous events")
		}
	}
}

// TestNewDefaults: zero durations take the defaults, and max is never
// shorter than quiet.
func TestNewDefaults(t *testing.T) {
	w := settle.New(0, 0)
	defer w.Stop()
	start := time.Now()
	w.Event(start)
	<-w.C()
	if waited := time.Since(start); waited < settle.DefaultQuiet {
		t.Errorf("default window fired after %s, before %s", waited, settle.DefaultQuiet)
	}
}
