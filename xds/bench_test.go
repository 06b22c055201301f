package xds_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// BenchmarkMemoryPerProxy connects 500 SotW ADS proxies over loopback, each
// on its own connection, each watching one service's listener, route,
// cluster and endpoints (1,000 services in the mesh, 10 namespaces), and
// reports heap bytes per connected proxy. Clients run in the same process,
// so the figure is an upper bound: it includes each client's gRPC
// connection and stream.
func BenchmarkMemoryPerProxy(b *testing.B) {
	const proxies = 500
	store := store.NewStore()
	if err := store.Replace(testSource, modeltest.Objects(modeltest.Size{Services: 1000, EndpointsPerService: 10, Routes: 100, Namespaces: 10})); err != nil {
		b.Fatal(err)
	}
	srv, err := xds.NewServer(xds.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	feed, err := model.NewFeed(store, model.FeedSettings{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Run(ctx, feed) }()
	go func() { _ = srv.Serve(ctx, lis) }()
	<-srv.Ready()

	for b.Loop() {
		before := heap()
		var conns []*grpc.ClientConn
		for i := range proxies {
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, cc)
			stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
			if err != nil {
				b.Fatal(err)
			}
			md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": fmt.Sprintf("ns-%d", i%10)})
			node := &corev3.Node{Id: fmt.Sprintf("mem-%d", i), Metadata: md}
			h := modeltest.Host(i % 1000)
			for _, sub := range []struct{ t, name string }{
				{resourcev3.ListenerType, xds.ListenerName(h, 7070)}, {resourcev3.RouteType, xds.ListenerName(h, 7070)},
				{resourcev3.ClusterType, xds.ClusterName(7070, "", h)}, {resourcev3.EndpointType, xds.ClusterName(7070, "", h)},
			} {
				if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: sub.t, ResourceNames: []string{sub.name}}); err != nil {
					b.Fatal(err)
				}
				resp, err := stream.Recv()
				if err != nil {
					b.Fatal(err)
				}
				if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: []string{sub.name}, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
					b.Fatal(err)
				}
			}
		}
		time.Sleep(200 * time.Millisecond) // let the ACKs land
		after := heap()
		b.ReportMetric(float64(after-before)/proxies, "B/proxy")
		for _, cc := range conns {
			cc.Close()
		}
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
