package adapter_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
)

// BenchmarkFirstSet measures what follows a registry's first complete
// read: 10,000 services × 10 endpoints Put in a Set, its first Changes,
// and the Store taking them (Sink.Apply) — the serial part of an initial
// sync, after the last registry read.
func BenchmarkFirstSet(b *testing.B) {
	const services, endpoints = 10000, 10
	groups := make([][]*store.Object, services)
	for i := range groups {
		name := fmt.Sprintf("svc-%05d", i)
		addrs := make([]string, endpoints)
		for j := range addrs {
			addrs[j] = fmt.Sprintf("10.%d.%d.%d", i/256, i%256, j)
		}
		groups[i] = service(name, addrs...)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b.ReportAllocs()
	for b.Loop() {
		st := store.NewStore()
		sink := adapter.NewSink(st, setMeta, "bench", nil, quiet)
		set := adapter.NewSet()
		for i, g := range groups {
			set.Put(fmt.Sprint(i), g)
		}
		if err := sink.Apply(set.Changes()); err != nil {
			b.Fatal(err)
		}
		if n := len(st.Snapshot().List(store.KindWorkloadEntry)); n != services*endpoints {
			b.Fatalf("%d WorkloadEntries in the Store, want %d", n, services*endpoints)
		}
	}
}
