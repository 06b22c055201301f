package sharedstate_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

// BenchmarkRegistrationVisible measures registration through replica A →
// the WorkloadEntry in replica B's Store, through a real Consul dev agent or
// a real ZooKeeper, with `preload` other registrations A already shares.
// Each op registers one more VM through A (a Store update of A's
// registration source, as autoregister makes) and waits for it on B; p50
// and p99 are reported.
func BenchmarkRegistrationVisible(b *testing.B) {
	for _, backend := range []string{sharedstate.TypeConsul, sharedstate.TypeZooKeeper} {
		b.Run(backend, func(b *testing.B) {
			var spec sharedstate.Spec
			var target string
			switch backend {
			case sharedstate.TypeConsul:
				c := testenv.StartConsul(b)
				spec, target = sharedstate.Spec{Type: backend, TTL: 10 * time.Second}, c.HTTPAddr
			default:
				z := testenv.StartZooKeeper(b)
				spec, target = sharedstate.Spec{Type: backend, TTL: 5 * time.Second}, z.Addr
			}
			for _, preload := range []int{0, 1000} {
				b.Run(fmt.Sprintf("preload=%d", preload), func(b *testing.B) {
					spec := spec
					spec.Prefix = fmt.Sprintf("bench%d", preload)
					a := startReplica(b, "A", spec, target)
					r := startReplica(b, "B", spec, target)
					<-a.state.Synced()
					<-r.state.Synced()
					var objs []*store.Object
					for i := range preload {
						objs = append(objs, entry("fin", fmt.Sprintf("pre-%d", i), fmt.Sprintf("10.1.%d.%d", i/250, i%250), true))
					}
					if err := a.store.Replace(localSource, objs); err != nil {
						b.Fatal(err)
					}
					last := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: fmt.Sprintf("pre-%d", preload-1)}
					for preload > 0 && r.store.Snapshot().Get(last) == nil {
						time.Sleep(10 * time.Millisecond)
					}
					sub := r.store.Subscribe()
					defer sub.Close()
					lat := make([]time.Duration, 0, b.N)
					b.ResetTimer()
					for i := range b.N {
						name := fmt.Sprintf("vm-%d", i)
						key := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: name}
						start := time.Now()
						if err := a.store.Update(localSource, []*store.Object{entry("fin", name, fmt.Sprintf("10.2.%d.%d", i/250%250, i%250), true)}, nil); err != nil {
							b.Fatal(err)
						}
						deadline := time.After(10 * time.Second)
						for r.store.Snapshot().Get(key) == nil {
							select {
							case <-sub.C():
								sub.Take()
							case <-deadline:
								b.Fatalf("%s not visible on B within 10s", name)
							}
						}
						lat = append(lat, time.Since(start))
					}
					b.StopTimer()
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
				})
			}
		})
	}
}
