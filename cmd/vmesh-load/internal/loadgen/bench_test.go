package loadgen

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// benchModel builds the model of the harness's default config (1,000
// services × 10 endpoints, 100 VirtualServices, 10 namespaces) from files,
// as vmesh does.
func benchModel(b *testing.B) (*model.Snapshot, *xds.Proxy) {
	b.Helper()
	dir := b.TempDir()
	sz := DefaultOptions().Size
	if err := Write(dir, sz, SourceDir); err != nil {
		b.Fatal(err)
	}
	objs, errs, err := filestore.LoadPath(dir)
	if err != nil || len(errs) > 0 {
		b.Fatalf("LoadPath: %v %v", err, errs)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "dir:" + dir, Class: store.ClassConfig}, objs); err != nil {
		b.Fatal(err)
	}
	return model.Build(st.Snapshot()), &xds.Proxy{ID: "bench", Kind: xds.KindGRPC, Namespace: "ns-1", Labels: map[string]string{"tier": "web"}}
}

// generators are vmesh's generators for one proxy, one per xDS type.
var generators = []struct {
	name string
	gen  func(*model.Snapshot, *xds.Proxy) ([]proto.Message, error)
}{
	{"LDS", func(s *model.Snapshot, p *xds.Proxy) ([]proto.Message, error) { return msgs(xds.Listeners(s, p)) }},
	{"RDS", func(s *model.Snapshot, p *xds.Proxy) ([]proto.Message, error) { return msgs(xds.Routes(s, p)) }},
	{"CDS", func(s *model.Snapshot, p *xds.Proxy) ([]proto.Message, error) { return msgs(xds.Clusters(s, p)) }},
	{"EDS", func(s *model.Snapshot, p *xds.Proxy) ([]proto.Message, error) { return msgs(xds.Endpoints(s, p)) }},
}

func msgs[T proto.Message](in []T, err error) ([]proto.Message, error) {
	out := make([]proto.Message, len(in))
	for i, m := range in {
		out[i] = m
	}
	return out, err
}

// BenchmarkGenerate measures each generator for one proxy that sees all
// 1,000 services (1,000 listeners and routes, 1,200 clusters and
// assignments); resources/op says how many it made.
func BenchmarkGenerate(b *testing.B) {
	s, p := benchModel(b)
	for _, g := range generators {
		b.Run(g.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				out, err := g.gen(s, p)
				if err != nil {
					b.Fatal(err)
				}
				n = len(out)
			}
			b.ReportMetric(float64(n), "resources/op")
		})
	}
}

// BenchmarkSerialize measures the deterministic marshalling of one proxy's
// resources of each type, which vmesh does once per group and change.
func BenchmarkSerialize(b *testing.B) {
	s, p := benchModel(b)
	for _, g := range generators {
		out, err := g.gen(s, p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(g.name, func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				size = 0
				for _, m := range out {
					bs, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
					if err != nil {
						b.Fatal(err)
					}
					size += len(bs)
				}
			}
			b.SetBytes(int64(size))
		})
	}
}

// BenchmarkBaselineSnapshot measures what the baseline pre-builds per
// group: all four types generated, hashed and given delta versions.
func BenchmarkBaselineSnapshot(b *testing.B) {
	s, p := benchModel(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := buildSnapshot(s, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProxyApplyEDS measures the harness's own per-response work for
// a state-of-the-world EDS response of 1,200 assignments in which one
// changed (what each Envoy-like SotW proxy does per endpoint change), so
// harness CPU in the load figures can be put in proportion.
func BenchmarkProxyApplyEDS(b *testing.B) {
	s, p := benchModel(b)
	eds, err := xds.Endpoints(s, p)
	if err != nil {
		b.Fatal(err)
	}
	resp := edsResponse(b, eds)
	px := NewProxy(ProxySpec{ID: "p", Namespace: "ns-1", Style: StyleEnvoy}, NewShared())
	px.applySotW(resp)
	b.ReportAllocs()
	for b.Loop() {
		px.applySotW(resp)
	}
}

func edsResponse[T proto.Message](b *testing.B, in []T) *discoveryv3.DiscoveryResponse {
	resp := &discoveryv3.DiscoveryResponse{TypeUrl: resourcev3.EndpointType, VersionInfo: "v"}
	for _, m := range in {
		a, err := anypb.New(m)
		if err != nil {
			b.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	return resp
}

// BenchmarkStartToReady measures vmesh from controlplane.New to /ready
// (config loaded, first snapshot built and served) over the harness's
// default config (1,000 services × 10 endpoints, 100 VirtualServices):
// "new-ca" with an empty data directory (the CA's key is made), "existing"
// with the data directory of a previous start (whose decode cache serves
// every file). cpu-ms/op is the process's CPU over the same span: the
// figure the machine's load does not move.
func BenchmarkStartToReady(b *testing.B) {
	dir := b.TempDir()
	if err := Write(filepath.Join(dir, "config"), DefaultOptions().Size, SourceDir); err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration // the process's CPU from New to ready, summed
	start := func(b *testing.B, dataDir string) {
		before := SelfCPU()
		cfg := controlplane.DefaultConfig()
		cfg.ConfigDir, cfg.DataDir = filepath.Join(dir, "config"), dataDir
		cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cp, err := controlplane.New(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- cp.Run(ctx) }()
		for !cp.Ready() {
			select {
			case err := <-errc:
				b.Fatalf("ended before ready: %v", err)
			case <-time.After(time.Millisecond):
			}
		}
		b.StopTimer()
		cpu += SelfCPU() - before
		cancel()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.Run("new-ca", func(b *testing.B) {
		cpu = 0
		for i := 0; b.Loop(); i++ {
			start(b, filepath.Join(dir, fmt.Sprintf("data-%d", i)))
		}
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
	})
	b.Run("existing", func(b *testing.B) {
		data := filepath.Join(dir, "data-existing")
		b.StopTimer()
		start(b, data)
		b.StartTimer()
		cpu = 0
		for b.Loop() {
			start(b, data)
		}
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
	})
}
