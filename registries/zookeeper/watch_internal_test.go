package zookeeper

import (
	"fmt"
	"testing"

	"github.com/go-zookeeper/zk"
)

// TestPathsSpreadOverSessions checks that the adapter's watches use both
// of its sessions, and that TestWatchesSurviveSessionExpiryAndRestart's
// root watch and provider watch are on different ones (so that test sees
// both sessions re-arm after expiry).
func TestPathsSpreadOverSessions(t *testing.T) {
	w := &watcher{conns: []*zk.Conn{new(zk.Conn), new(zk.Conn)}}
	if Sessions != len(w.conns) {
		t.Fatalf("Sessions = %d; this test assumes %d", Sessions, len(w.conns))
	}
	if w.connFor("/dubbo") == w.connFor("/dubbo/org.apache.dubbo.demo.DemoService/providers") {
		t.Error("the root and the demo interface's providers are read through one session")
	}
	used := map[*zk.Conn]int{}
	for i := range 1000 {
		used[w.connFor(fmt.Sprintf("/dubbo/com.acme.Service%04d/providers", i))]++
	}
	for c, n := range used {
		if n < 400 {
			t.Errorf("session %p reads %d of 1,000 interfaces", c, n)
		}
	}
	if len(used) != 2 {
		t.Errorf("1,000 interfaces read through %d sessions", len(used))
	}
}
