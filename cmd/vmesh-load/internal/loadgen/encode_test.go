package loadgen

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
)

// TestEncodedRequestDecodesAsTheRequest checks that a request sent with
// pre-encoded names is the request the server decodes.
func TestEncodedRequestDecodesAsTheRequest(t *testing.T) {
	want := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "p"}, TypeUrl: resourcev3.EndpointType, VersionInfo: "r3", ResponseNonce: "9",
		ResourceNames: []string{"outbound|7070||a.ns-0.svc.cluster.local", "outbound|7070|v1|a.ns-0.svc.cluster.local", ""}}
	head := proto.Clone(want).(*discoveryv3.DiscoveryRequest)
	head.ResourceNames = nil
	c := newClientCodec()
	data, err := c.Marshal(&encodedRequest{head: head, names: encodeNames(want.ResourceNames)})
	if err != nil {
		t.Fatal(err)
	}
	got := &discoveryv3.DiscoveryRequest{}
	if err := proto.Unmarshal(data.Materialize(), got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("decoded %v, want %v", got, want)
	}
	// Other messages are protobuf's.
	data, err = c.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got = &discoveryv3.DiscoveryRequest{}
	if err := c.Unmarshal(data, got); err != nil || !proto.Equal(got, want) {
		t.Fatalf("protobuf path: %v, %v", got, err)
	}
}
