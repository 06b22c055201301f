package xds_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// liveHeap is the live heap after full collections, repeated until it has
// not shrunk for five rounds: the cleanups that drop interned names'
// entries run on their own goroutine after a collection (slowly under
// -race), and the name table is rebuilt smaller as they do.
func liveHeap() uint64 {
	var ms runtime.MemStats
	low, steady := uint64(1<<63-1), 0
	for deadline := time.Now().Add(15 * time.Second); steady < 5 && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc+64<<10 < low {
			low, steady = ms.HeapAlloc, 0
		} else {
			steady++
		}
	}
	return min(low, ms.HeapAlloc)
}

const mib = 1 << 20

// memMesh serves a few services and returns the mesh and a client
// connection to it.
func memMesh(t *testing.T, ctx context.Context) (*mesh, *grpc.ClientConn) {
	t.Helper()
	st := store.NewStore()
	var objs []*store.Object
	for i := range 20 {
		app := fmt.Sprintf("svc%d", i)
		objs = append(objs, seObj(app, app+".internal", app), weObj(app+"-1", app, fmt.Sprintf("10.0.%d.1", i)))
	}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, ctx, st)
	cc, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return m, cc
}

// adsOnce opens an ADS stream as node, sends each request (after the first,
// without the node) and waits for an answer to each, then closes the
// stream.
func adsOnce(ctx context.Context, cc *grpc.ClientConn, node *corev3.Node, reqs ...*discoveryv3.DiscoveryRequest) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	for i, req := range reqs {
		if i == 0 {
			req.Node = node
		}
		if err := stream.Send(req); err != nil {
			return err
		}
		if _, err := stream.Recv(); err != nil {
			return fmt.Errorf("%s: %w", req.TypeUrl, err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	_, _ = stream.Recv() // the server ends the stream
	return nil
}

// inParallel runs f(i) for i in [0, n) on 8 workers.
func inParallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, n)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func waitNoStreams(t *testing.T, m *mesh) {
	t.Helper()
	eventually(t, "every stream gone from /debug/syncz", func() bool { return len(m.syncz()) == 0 })
}

// TestDepartedProxiesAreFreed: 1,600 proxies, each with its own IPs and
// labels (an Envoy sidecar is a group of its own; proxyless clients keep
// make-before-break state per stream), connect, get their config and
// leave. Without any config push, the live heap ends within 8 MiB of where
// it started and no group is left.
func TestDepartedProxiesAreFreed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, cc := memMesh(t, ctx)
	proxy := func(i int) error {
		kind := map[string]any{}
		if i%2 == 1 {
			kind["GENERATOR"] = "grpc"
		}
		meta := map[string]any{
			"NAMESPACE": "default", "INSTANCE_IPS": fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256),
			"WORKLOAD_NAME": fmt.Sprintf("vm-%d", i),
			"LABELS":        map[string]any{"app": fmt.Sprintf("app-%d", i), "version": fmt.Sprintf("v%d", i)},
		}
		for k, v := range kind {
			meta[k] = v
		}
		md, err := structpb.NewStruct(meta)
		if err != nil {
			return err
		}
		node := &corev3.Node{Id: fmt.Sprintf("vm-%d.default", i), Metadata: md}
		if i%2 == 1 {
			host := fmt.Sprintf("svc%d.internal:80", i%20)
			return adsOnce(ctx, cc, node,
				&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ListenerType, ResourceNames: []string{host}},
				&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.RouteType, ResourceNames: []string{host}},
				&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNames: []string{fmt.Sprintf("outbound|80||svc%d.internal", i%20)}})
		}
		return adsOnce(ctx, cc, node,
			&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType},
			&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ListenerType})
	}
	// Warm up (gRPC's buffers, the first generations), then measure.
	inParallel(t, 40, proxy)
	waitNoStreams(t, m)
	rev := m.store.Snapshot().Revision
	before := liveHeap()
	start := time.Now()
	inParallel(t, 1600, func(i int) error { return proxy(i + 40) })
	waitNoStreams(t, m)
	eventually(t, "no proxy group left", func() bool { return m.gauge("vmesh_xds_proxy_groups") == 0 })
	after := liveHeap()
	if r := m.store.Snapshot().Revision; r != rev {
		t.Fatalf("the Store changed (revision %d -> %d): this test is about no push", rev, r)
	}
	t.Logf("live heap %.1f MiB before, %.1f MiB after 1,600 departed proxies (%s)", float64(before)/mib, float64(after)/mib, time.Since(start).Round(time.Millisecond))
	if after > before+8*mib {
		t.Fatalf("live heap grew by %.1f MiB over 1,600 departed proxies, want < 8 MiB", float64(after-before)/mib)
	}
}

// TestInternedNamesAreReleased: 120 streams each subscribe to 2,000 unique
// resource names, then close. The names they were the only holders of are
// released: the live heap ends within 16 MiB of where it started.
func TestInternedNamesAreReleased(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, cc := memMesh(t, ctx)
	pad := strings.Repeat("x", 200)
	stream := func(i int) error {
		names := make([]string, 2000)
		for j := range names {
			names[j] = fmt.Sprintf("outbound|80||stream-%d-name-%d.%s.internal", i, j, pad)
		}
		md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "default"})
		return adsOnce(ctx, cc, &corev3.Node{Id: fmt.Sprintf("names-%d", i), Metadata: md},
			&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names})
	}
	inParallel(t, 8, func(i int) error { return stream(-1 - i) })
	waitNoStreams(t, m)
	before := liveHeap()
	inParallel(t, 120, stream)
	waitNoStreams(t, m)
	after := liveHeap()
	t.Logf("live heap %.1f MiB before, %.1f MiB after 120 closed streams of 2,000 unique names (%.0f MiB of names sent)",
		float64(before)/mib, float64(after)/mib, float64(120*2000*(len(pad)+40))/mib)
	if after > before+16*mib {
		t.Fatalf("live heap grew by %.1f MiB over 120 closed streams, want < 16 MiB", float64(after-before)/mib)
	}
}
