package mcpsource_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/filestore/mcpsource"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// TestReadsVmeshMCPServer: vmesh's client reads vmesh's own MCP server
// (xds/mcp, issue 50 part 2) serving the quickstart, and holds every
// object of the kinds MCP carries, equal to the served Store's.
func TestReadsVmeshMCPServer(t *testing.T) {
	objs, errs, err := filestore.LoadPath("../../examples/quickstart/config")
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	served := store.NewStore()
	if err := served.Replace(store.Source{Name: "dir:quickstart", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	srv, err := xds.NewServer(xds.Options{MCPAuthorize: func(context.Context) (string, error) { return "test", nil }})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := model.NewFeed(served, model.FeedSettings{DebounceQuiet: 20 * time.Millisecond, DebounceMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); _ = srv.Run(ctx, feed) }()
	go func() { defer wg.Done(); _ = srv.Serve(ctx, lis) }()
	defer func() { cancel(); wg.Wait() }()

	st := store.NewStore()
	src, err := mcpsource.New(mcpsource.Config{Address: "xds://" + lis.Addr().String(), SyncWait: time.Hour}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { defer wg.Done(); _ = src.Run(ctx) }()
	select {
	case <-src.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("vmesh's MCP server did not answer every type within 30s")
	}
	want := 0
	for _, kind := range store.Kinds {
		for _, o := range served.Snapshot().List(kind) {
			if kind == store.KindGatewayClass {
				continue
			}
			got := st.Snapshot().Get(o.Key)
			if got == nil {
				if _, isMCP := mcpKind(kind); isMCP {
					t.Errorf("%s not received", o.Key)
				}
				continue
			}
			want++
			if !proto.Equal(got.Spec, o.Spec) {
				t.Errorf("%s: received spec differs", o.Key)
			}
		}
	}
	if want == 0 {
		t.Fatal("no object received")
	}
	t.Logf("%d objects received, equal to the served ones", want)
	if s := src.Stats(); s.NACKs != 0 {
		t.Errorf("NACKed vmesh's own server: %+v", s)
	}
}

func mcpKind(k store.Kind) (string, bool) {
	for _, ty := range []store.Kind{store.KindServiceEntry, store.KindWorkloadEntry, store.KindWorkloadGroup, store.KindVirtualService,
		store.KindDestinationRule, store.KindSidecar, store.KindGateway, store.KindPeerAuthentication, store.KindAuthorizationPolicy, store.KindRequestAuthentication} {
		if ty == k {
			return string(k), true
		}
	}
	return "", false
}
