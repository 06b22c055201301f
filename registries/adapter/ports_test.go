package adapter_test

import (
	"fmt"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
)

// portsString renders ServicePorts as "name:number/protocol ...".
func portsString(ports []*networking.ServicePort) string {
	var s []string
	for _, p := range ports {
		s = append(s, fmt.Sprintf("%s:%d/%s", p.Name, p.Number, p.Protocol))
	}
	return strings.Join(s, " ")
}

func grpcPort(instances ...uint32) adapter.PortCandidate {
	return adapter.PortCandidate{Name: "grpc", Protocol: "GRPC", Instances: instances}
}

func httpPort(instances ...uint32) adapter.PortCandidate {
	return adapter.PortCandidate{Name: "http", Protocol: "HTTP", Instances: instances}
}

// published is a complete set with one ServiceEntry per name.
func published(names ...string) []*store.Object {
	meta := adapter.Meta{Type: "consul", Name: "c1", Namespace: "default"}
	var objs []*store.Object
	for _, n := range names {
		objs = append(objs, meta.ServiceEntry(n, n, []string{n + ".service.consul"}, nil, nil))
	}
	return objs
}

func TestPortNumbersStayWhileTheServiceExists(t *testing.T) {
	var pn adapter.PortNumbers
	check := func(what, service string, want string, candidates ...adapter.PortCandidate) {
		t.Helper()
		if got := portsString(pn.Ports(service, candidates)); got != want {
			t.Errorf("%s: ports %q, want %q", what, got, want)
		}
	}

	check("first sight: the common port, lowest on a tie", "inventory", "grpc:33387/GRPC", grpcPort(41000, 33387, 42000))
	pn.Retain(published("inventory"))
	check("the lowest instance is gone", "inventory", "grpc:33387/GRPC", grpcPort(41000, 42000))
	check("another port is more common", "inventory", "grpc:33387/GRPC", grpcPort(41000, 42000, 42000))
	pn.Retain(published("inventory"))
	check("still kept after another publish", "inventory", "grpc:33387/GRPC", grpcPort(42000))
	check("services are numbered apart", "orders", "grpc:42000/GRPC", grpcPort(42000, 43000))

	// Gone from a published set: numbered afresh when it comes back.
	pn.Retain(published("orders"))
	check("reappears after it was gone", "inventory", "grpc:42000/GRPC", grpcPort(42000))
	check("the other service kept its number", "orders", "grpc:42000/GRPC", grpcPort(43000))

	// No instance at all: nothing is numbered, nothing is kept.
	check("no instances", "empty", "", grpcPort())
	check("an empty candidate kept nothing", "empty", "grpc:9000/GRPC", grpcPort(9000))
}

func TestPortNumbersSeveralProtocols(t *testing.T) {
	var pn adapter.PortNumbers
	got := portsString(pn.Ports("web", []adapter.PortCandidate{httpPort(8080), grpcPort(9090, 9091)}))
	if got != "http:8080/HTTP grpc:9090/GRPC" {
		t.Fatalf("first sight: %q", got)
	}
	// A new protocol on a number another port already has is left out;
	// the port numbered first keeps its number.
	got = portsString(pn.Ports("web", []adapter.PortCandidate{
		httpPort(8081), grpcPort(9091),
		{Name: "tcp", Protocol: "TCP", Instances: []uint32{9090}},
	}))
	if got != "http:8080/HTTP grpc:9090/GRPC" {
		t.Errorf("new protocol on a taken number: %q", got)
	}
	// A protocol with no instance left keeps its number while the service
	// exists...
	got = portsString(pn.Ports("web", []adapter.PortCandidate{grpcPort(9091)}))
	if got != "grpc:9090/GRPC" {
		t.Errorf("http without instances: %q", got)
	}
	got = portsString(pn.Ports("web", []adapter.PortCandidate{grpcPort(9091), httpPort(8082)}))
	if got != "http:8080/HTTP grpc:9090/GRPC" {
		t.Errorf("http back: %q", got)
	}
	// ...unless a new protocol needs that number.
	pn.Ports("web", []adapter.PortCandidate{grpcPort(9091)})
	got = portsString(pn.Ports("web", []adapter.PortCandidate{grpcPort(9091), {Name: "tcp", Protocol: "TCP", Instances: []uint32{8080}}}))
	if got != "tcp:8080/TCP grpc:9090/GRPC" {
		t.Errorf("new protocol on an absent port's number: %q", got)
	}
	got = portsString(pn.Ports("web", []adapter.PortCandidate{grpcPort(9091), httpPort(8083)}))
	if got != "http:8083/HTTP grpc:9090/GRPC" {
		t.Errorf("http numbered afresh after giving its number up: %q", got)
	}
}
