package adapter_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
)

func TestDNSLabelAndName(t *testing.T) {
	for _, tc := range []struct{ name, in, label, dns string }{
		{name: "java class", in: "org.apache.Demo$Inner_Service", label: "org-apache-demo-inner-service", dns: "org.apache.demo-inner-service"},
		{name: "empty", in: "", label: "x", dns: "x"},
		{name: "trim dashes", in: "-a..b-", label: "a--b", dns: "a.b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := adapter.DNSLabel(tc.in); got != tc.label {
				t.Errorf("DNSLabel(%q) = %q, want %q", tc.in, got, tc.label)
			}
			if got := adapter.DNSName(tc.in); got != tc.dns {
				t.Errorf("DNSName(%q) = %q, want %q", tc.in, got, tc.dns)
			}
		})
	}
	long := strings.Repeat("a", 70)
	a, b := adapter.DNSLabel(long+"1"), adapter.DNSLabel(long+"2")
	if len(a) > 63 || a == b {
		t.Errorf("long labels: %q (%d) and %q must be distinct and <= 63", a, len(a), b)
	}
	name := adapter.DNSName(strings.Repeat("abcdefghij.", 30))
	if len(name) > 253 {
		t.Errorf("DNSName too long: %d", len(name))
	}
}

func TestLabelsKeepOnlyValid(t *testing.T) {
	got := adapter.Labels(nil, map[string]string{
		"version": "1.0.0", "methods": "a,b", "dubbo.metadata.revision": "abc", "bad key": "x",
		"example.com/team": "pay", "json": `[{"port":1}]`, "empty": "",
	})
	want := map[string]string{"version": "1.0.0", "dubbo.metadata.revision": "abc", "example.com/team": "pay", "empty": ""}
	if len(got) != len(want) {
		t.Fatalf("Labels() = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Labels()[%q] = %q, want %q", k, got[k], v)
		}
	}
}

func TestSelectorValueIsValidAndDistinct(t *testing.T) {
	a := adapter.SelectorValue(strings.Repeat("x", 80) + ".a")
	b := adapter.SelectorValue(strings.Repeat("x", 80) + ".b")
	if !adapter.IsLabelValue(a) || !adapter.IsLabelValue(b) || a == b {
		t.Errorf("SelectorValue gave %q and %q", a, b)
	}
	if got := adapter.SelectorValue("web.dc1"); got != "web.dc1" {
		t.Errorf("valid name changed: %q", got)
	}
}

func TestProtocol(t *testing.T) {
	for in, want := range map[string][2]string{
		"": {"TCP", "tcp"}, "grpc": {"GRPC", "grpc"}, "HTTP": {"HTTP", "http"}, "http2": {"HTTP2", "http2"},
		"dubbo": {"TCP", "tcp-dubbo"}, "tri": {"GRPC", "grpc-tri"}, "thrift": {"TCP", "tcp-thrift"},
	} {
		p, n := adapter.Protocol(in)
		if p != want[0] || n != want[1] {
			t.Errorf("Protocol(%q) = %s, %s; want %s, %s", in, p, n, want[0], want[1])
		}
	}
}

func TestCommonPort(t *testing.T) {
	if got := adapter.CommonPort([]uint32{9000, 8080, 9000, 8080, 7000}); got != 8080 {
		t.Errorf("tie: got %d, want lowest 8080", got)
	}
	if got := adapter.CommonPort([]uint32{9000, 8080, 9000}); got != 9000 {
		t.Errorf("got %d, want 9000", got)
	}
	if got := adapter.CommonPort(nil); got != 0 {
		t.Errorf("none: got %d", got)
	}
}

func TestObjectsAndSink(t *testing.T) {
	meta := adapter.Meta{Type: "consul", Name: "c1", Namespace: "default"}
	se := meta.ServiceEntry("web", "dc1/web", []string{"web.service.consul"},
		[]*networking.ServicePort{{Number: 9090, Name: "grpc", Protocol: "GRPC"}, {Number: 80, Name: "http", Protocol: "HTTP"}}, nil)
	spec := se.Spec.(*networking.ServiceEntry)
	if spec.Ports[0].Number != 80 || spec.WorkloadSelector.Labels[adapter.LabelService] != "web" ||
		spec.Resolution != networking.ServiceEntry_STATIC || spec.Location != networking.ServiceEntry_MESH_INTERNAL {
		t.Fatalf("ServiceEntry spec = %v", spec)
	}
	unhealthy := false
	we := meta.WorkloadEntry("web-10-0-0-1-80", "dc1/web/web-1", "web",
		&networking.WorkloadEntry{Address: "10.0.0.1", Labels: map[string]string{"v": "1"}}, &unhealthy)
	if we.Annotations[meshlabels.HealthChecksAnnotation] != "true" || we.Healthy == nil || *we.Healthy {
		t.Errorf("health not carried: %v %v", we.Annotations, we.Healthy)
	}
	if we.Labels[adapter.LabelService] != "web" || we.Labels["v"] != "1" || we.Origin.Registry != "dc1/web/web-1" ||
		we.Origin.Source != "registry:c1" || we.Annotations[adapter.AnnotationRegistry] != "consul" {
		t.Errorf("WorkloadEntry metadata = %+v", we)
	}
	unknown := meta.WorkloadEntry("x", "o", "web", &networking.WorkloadEntry{Address: "10.0.0.2"}, nil)
	if _, ok := unknown.Annotations[meshlabels.HealthChecksAnnotation]; ok || unknown.Healthy != nil {
		t.Error("unknown health must not enable health checks")
	}

	reg := prometheus.NewRegistry()
	m, err := adapter.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cs := store.NewStore()
	sink := adapter.NewSink(cs, meta, "127.0.0.1:8500", m, nil)
	if err := sink.Replace([]*store.Object{se, we}); err != nil {
		t.Fatal(err)
	}
	sink.SetConnected(true)
	sink.Skip("malformed_url")
	sink.Error(errors.New("boom"))
	st := sink.Status()
	if !st.Connected || st.Objects != 2 || st.ServiceEntries != 1 || st.WorkloadEntries != 1 || st.Skipped != 1 ||
		st.LastError != "boom" || st.LastSync.IsZero() || st.Syncs != 1 {
		t.Errorf("Status() = %+v", st)
	}
	if got := cs.Snapshot().Get(we.Key); got != we {
		t.Errorf("store has %v, want the WorkloadEntry", got)
	}
	if v := gauge(t, reg, "vmesh_registries_objects", "kind", "WorkloadEntry"); v != 1 {
		t.Errorf("objects gauge = %v", v)
	}
	if v := gauge(t, reg, "vmesh_registries_connected", "registry", "c1"); v != 1 {
		t.Errorf("connected gauge = %v", v)
	}
	if err := sink.Replace([]*store.Object{we, we}); err == nil || sink.Status().Objects != 2 {
		t.Error("a duplicate key must be rejected and keep the previous status")
	}
}

// gauge returns the value of the named metric's series whose label has the
// value, or -1.
func gauge(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					if g := m.GetGauge(); g != nil {
						return g.GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
