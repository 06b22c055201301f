package xds

import (
	"context"
	"fmt"
	"net"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// cacheHolds lists what the cache keeps per stream and per group.
func (s *Server) cacheHolds() string {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("members %d, group counts %d, gens %d, genErrs %d, diffs %d, watches %d, sent %d, staged %d, delta requests %d, delta streams %d",
		len(c.members), len(c.groupStreams), len(c.gens), len(c.genErrs), len(c.diffs), len(c.watches), len(c.sent), len(c.staged), len(c.deltaRequests), len(c.deltaStreams))
}

// TestClosedStreamsLeaveNothingInTheCache: SotW sidecars, SotW proxyless
// clients (with make-before-break state) and delta clients connect, are
// answered, ACK and leave; with no push since, the cache holds nothing for
// them: no member, group, generation, answer, staged state or watch.
func TestClosedStreamsLeaveNothingInTheCache(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objs := modeltest.Objects(modeltest.Size{Services: 4, EndpointsPerService: 2, Routes: 1, Namespaces: 1})
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(Options{Logger: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := model.NewFeed(st, model.FeedSettings{})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Run(ctx, feed) }()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ctx, lis) }()
	<-s.Ready()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	empty := "members 0, group counts 0, gens 0, genErrs 0, diffs 0, watches 0, sent 0, staged 0, delta requests 0, delta streams 0"
	if got := s.cacheHolds(); got != empty {
		t.Fatalf("before any stream: %s", got)
	}
	host := fmt.Sprintf("%s:7070", modeltest.Host(0))
	cluster := ClusterName(7070, "", modeltest.Host(0))
	for i := range 6 {
		meta := map[string]any{"NAMESPACE": "ns-0", "INSTANCE_IPS": fmt.Sprintf("10.9.0.%d", i), "LABELS": map[string]any{"vm": fmt.Sprint(i)}}
		if i%3 != 0 {
			meta["GENERATOR"] = "grpc"
		}
		md, _ := structpb.NewStruct(meta)
		node := &corev3.Node{Id: fmt.Sprintf("p-%d", i), Metadata: md}
		sctx, stop := context.WithCancel(ctx)
		if i%3 == 2 {
			ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(sctx)
			if err != nil {
				t.Fatal(err)
			}
			for j, r := range []*discoveryv3.DeltaDiscoveryRequest{
				{Node: node, TypeUrl: resourcev3.ListenerType, ResourceNamesSubscribe: []string{host}},
				{TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{cluster}},
			} {
				if err := ads.Send(r); err != nil {
					t.Fatal(err)
				}
				resp, err := ads.Recv()
				if err != nil {
					t.Fatalf("delta %d: %v", j, err)
				}
				if err := ads.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: resp.Nonce}); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
			if err != nil {
				t.Fatal(err)
			}
			reqs := []*discoveryv3.DiscoveryRequest{{TypeUrl: resourcev3.ClusterType}, {TypeUrl: resourcev3.ListenerType}}
			if i%3 == 1 {
				reqs = []*discoveryv3.DiscoveryRequest{
					{TypeUrl: resourcev3.ListenerType, ResourceNames: []string{host}},
					{TypeUrl: resourcev3.RouteType, ResourceNames: []string{host}},
					{TypeUrl: resourcev3.ClusterType, ResourceNames: []string{cluster}},
				}
			}
			reqs[0].Node = node
			for _, r := range reqs {
				if err := ads.Send(r); err != nil {
					t.Fatal(err)
				}
				resp, err := ads.Recv()
				if err != nil {
					t.Fatalf("%s: %v", r.TypeUrl, err)
				}
				if err := ads.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, ResourceNames: r.ResourceNames, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}); err != nil {
					t.Fatal(err)
				}
			}
		}
		waitFor(t, "the stream's watches", func() bool { return s.openWatches() > 0 })
		stop()
	}
	waitFor(t, "the cache to forget every stream", func() bool { return s.cacheHolds() == empty })
	waitFor(t, "/debug/syncz to forget every stream", func() bool {
		s.streams.mu.Lock()
		defer s.streams.mu.Unlock()
		return len(s.streams.byID) == 0
	})
}
