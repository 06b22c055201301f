package xds_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// The mesh of TestTrafficShiftsFailNoCall: consumers call greeter-v1; a
// VirtualService on that host splits its calls between greeter-v1 and two
// subsets of greeter-v2, as a migration from one fleet to another does.
const (
	shiftV1   = "greeter-v1.mesh.internal"
	shiftV2   = "greeter-v2.mesh.internal"
	shiftPort = 7070
)

// shiftDest is one destination of the split: a host and subset, and the
// providers that serve it.
type shiftDest struct {
	host, subset string
	app, color   string
	backends     []*xdstest.Backend
	present      []bool // which backends have a WorkloadEntry
}

// shiftConfig is the whole config of one step.
func shiftConfig(dests []*shiftDest, weights []int32) []*store.Object {
	se := func(name, host, app string) *store.Object {
		return &store.Object{
			Key: store.Key{Kind: store.KindServiceEntry, Namespace: "default", Name: name},
			Spec: &networking.ServiceEntry{
				Hosts: []string{host}, Location: networking.ServiceEntry_MESH_INTERNAL, Resolution: networking.ServiceEntry_STATIC,
				Ports:            []*networking.ServicePort{{Name: "grpc", Number: shiftPort, Protocol: "GRPC"}},
				WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": app}},
			},
		}
	}
	objs := []*store.Object{
		se("greeter-v1", shiftV1, "greeter-v1"),
		se("greeter-v2", shiftV2, "greeter-v2"),
		{
			Key: store.Key{Kind: store.KindDestinationRule, Namespace: "default", Name: "greeter-v2"},
			Spec: &networking.DestinationRule{
				Host: shiftV2,
				TrafficPolicy: &networking.TrafficPolicy{
					LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN}},
					OutlierDetection: &networking.OutlierDetection{
						Consecutive_5XxErrors: wrapperspb.UInt32(3), Interval: durationpb.New(5 * time.Second), BaseEjectionTime: durationpb.New(30 * time.Second),
					},
				},
				Subsets: []*networking.Subset{
					{Name: "blue", Labels: map[string]string{"color": "blue"}},
					{Name: "green", Labels: map[string]string{"color": "green"}},
				},
			},
		},
	}
	var route []*networking.HTTPRouteDestination
	for i, d := range dests {
		if weights[i] > 0 {
			route = append(route, &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: d.host, Subset: d.subset}, Weight: weights[i]})
		}
	}
	objs = append(objs, &store.Object{
		Key:  store.Key{Kind: store.KindVirtualService, Namespace: "default", Name: "greeter"},
		Spec: &networking.VirtualService{Hosts: []string{shiftV1}, Http: []*networking.HTTPRoute{{Route: route}}},
	})
	for _, d := range dests {
		for j, b := range d.backends {
			if !d.present[j] {
				continue
			}
			labels := map[string]string{"app": d.app}
			if d.color != "" {
				labels["color"] = d.color
			}
			objs = append(objs, &store.Object{
				Key:  store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: b.ID},
				Spec: &networking.WorkloadEntry{Address: "127.0.0.1", Ports: map[string]uint32{"grpc": uint32(b.Port)}, Labels: labels},
			})
		}
	}
	return objs
}

// caller makes RPCs back to back on several goroutines, without
// wait-for-ready, and records every failure.
type caller struct {
	mu      sync.Mutex
	ok      int
	byID    map[string]int
	failed  []string
	changed chan struct{} // closed and replaced on every answer
}

func (c *caller) run(ctx context.Context, client testpb.TestServiceClient) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := client.UnaryCall(cctx, &testpb.SimpleRequest{})
		cancel()
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		if err != nil {
			c.failed = append(c.failed, err.Error())
		} else {
			c.ok++
			c.byID[resp.GetServerId()]++
		}
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}
}

// waitCalls waits until n more calls than at ok have succeeded, returning
// the new count.
func (c *caller) waitCalls(t *testing.T, ok, n int, what string) int {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		cur, ch := c.ok, c.changed
		c.mu.Unlock()
		if cur >= ok+n {
			return cur
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%s: %d successful calls in 20s, want %d", what, cur-ok, n)
		}
	}
}

// routesAt waits until the proxy has ACKed the route configurations of
// version v in their final form, as /debug/syncz shows it (not "warming":
// see xds/staging.go).
func routesAt(t *testing.T, m *mesh, id, v string) {
	t.Helper()
	type typeStatus struct {
		Acked, Nack, NackVersion string
		Warming                  []string
	}
	deadline := time.Now().Add(20 * time.Second)
	var last []byte
	for {
		resp, err := http.Get(m.debug.URL + "/debug/syncz")
		if err != nil {
			t.Fatal(err)
		}
		last, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var proxies []struct {
			ID    string
			Types map[string]typeStatus
		}
		if err := json.Unmarshal(last, &proxies); err != nil {
			t.Fatal(err)
		}
		for _, p := range proxies {
			if p.ID != id {
				continue
			}
			for tn, ts := range p.Types {
				if ts.Nack != "" {
					t.Fatalf("%s NACKed %s %s: %s", id, tn, ts.NackVersion, ts.Nack)
				}
			}
			if ts := p.Types["RDS"]; ts.Acked == v && len(ts.Warming) == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not ACK the routes of %s in 20s: %s", id, v, last)
		}
		// Polls the server's record of the client's ACKs: the ACK itself
		// comes from the client, with nothing to wait on in this process.
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTrafficShiftsFailNoCall is a migration under load: a real grpc-go
// xDS client calls greeter-v1 continuously (no wait-for-ready) while a
// VirtualService shifts its calls 100 times between greeter-v1 and two
// subsets of greeter-v2 (destinations come and go as their weight drops
// to 0 and comes back) and providers leave and join (a destination the
// route names always keeps one; one the route does not name may lose
// them all, as the 1.0.0 fleet does once the cut-over is done). No call
// may fail: a config change must never break a working route.
func TestTrafficShiftsFailNoCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := store.NewStore()
	m := startMesh(t, ctx, store)
	<-m.srv.Ready()

	dests := []*shiftDest{
		{host: shiftV1, app: "greeter-v1"},
		{host: shiftV2, subset: "blue", app: "greeter-v2", color: "blue"},
		{host: shiftV2, subset: "green", app: "greeter-v2", color: "green"},
	}
	for i, d := range dests {
		for j := range 2 {
			d.backends = append(d.backends, xdstest.StartBackend(t, m.addr, xdstest.Node{ID: fmt.Sprintf("greeter-%d-%d", i, j), Namespace: "default"}))
			d.present = append(d.present, true)
		}
	}
	// Weights of v1, v2 blue, v2 green, step by step (each step differs
	// from the one before, so each changes the route configuration).
	plan := [][]int32{
		{100, 0, 0}, {90, 10, 0}, {50, 25, 25}, {0, 100, 0}, {0, 50, 50},
		{10, 0, 90}, {0, 0, 100}, {34, 33, 33}, {100, 0, 0}, {0, 1, 99},
		{80, 20, 0}, {0, 60, 40},
	}
	apply := func(weights []int32) string {
		t.Helper()
		if err := store.Replace(testSource, shiftConfig(dests, weights)); err != nil {
			t.Fatal(err)
		}
		return "r" + fmt.Sprint(store.Snapshot().Revision)
	}
	v := apply(plan[0])

	const clientID = "greeter-consumer"
	client := xdstest.Dial(t, m.addr, xdstest.Node{ID: clientID, Namespace: "default"}, fmt.Sprintf("%s:%d", shiftV1, shiftPort))
	xdstest.CallUntil(t, client, 20*time.Second)
	routesAt(t, m, clientID, v)

	c := &caller{byID: map[string]int{}, changed: make(chan struct{})}
	callCtx, stopCalls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); c.run(callCtx, client) }()
	}
	ok := c.waitCalls(t, 0, 20, "before the first shift")

	const steps = 100
	for step := 1; step <= steps; step++ {
		weights := plan[step%len(plan)]
		// Providers leave and join: a destination the new route names
		// keeps at least one provider, one it does not name may lose all.
		d := dests[step%len(dests)]
		j := (step / len(dests)) % 2
		switch {
		case weights[step%len(dests)] == 0:
			d.present[0], d.present[1] = step%2 == 0, false
		case !d.present[0] || !d.present[1]:
			d.present[0], d.present[1] = true, true
		default:
			d.present[j] = false
		}
		for i, d := range dests {
			if weights[i] > 0 && !slices.Contains(d.present, true) {
				d.present[0] = true
			}
		}
		v = apply(weights)
		routesAt(t, m, clientID, v)
		ok = c.waitCalls(t, ok, 10, fmt.Sprintf("step %d (%s, weights %v)", step, v, weights))
	}
	stopCalls()
	wg.Wait()

	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("%d calls through %d shifts, %d failed; answers by provider: %v", c.ok+len(c.failed), steps, len(c.failed), c.byID)
	if len(c.failed) > 0 {
		errs := map[string]int{}
		for _, e := range c.failed {
			errs[e]++
		}
		var lines []string
		for e, n := range errs {
			lines = append(lines, fmt.Sprintf("%5d × %s", n, e))
		}
		sort.Strings(lines)
		t.Errorf("%d of %d calls failed during the shifts:\n%s", len(c.failed), c.ok+len(c.failed), strings.Join(lines, "\n"))
	}
	for i, d := range dests {
		n := 0
		for _, b := range d.backends {
			n += c.byID[b.ID]
		}
		if n == 0 {
			t.Errorf("destination %d (%s %s) answered no call", i, d.host, d.subset)
		}
	}
}
