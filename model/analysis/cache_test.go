package analysis_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/analysis"
	"github.com/vmesh/vmesh/store"
)

func we(ns, name, addr string, origin store.Origin) *store.Object {
	o := &store.Object{APIVersion: "networking.istio.io/v1", Spec: &networking.WorkloadEntry{Address: addr}, Origin: origin}
	o.Kind, o.Namespace, o.Name = store.KindWorkloadEntry, ns, name
	return o
}

// TestAnalysisFollowsWhatItReads checks the cached analysis: a
// registry's WorkloadEntry changes (which the analysis does not read) keep
// it, and it equals a fresh Analyze of every snapshot; a change to a file's
// WorkloadEntry or a ServiceEntry shows at once.
func TestAnalysisFollowsWhatItReads(t *testing.T) {
	s := store.NewStore()
	cache := &analysis.Cache{}
	files := store.Source{Name: "dir:/cfg", Class: store.ClassConfig}
	reg := store.Source{Name: "registry:zk", Class: store.ClassRegistry}
	se := func(ns, name, app string, origin store.Origin) *store.Object {
		o := &store.Object{APIVersion: "networking.istio.io/v1", Origin: origin, Spec: &networking.ServiceEntry{
			Hosts: []string{name + ".example"}, Resolution: networking.ServiceEntry_STATIC,
			Ports:            []*networking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": app}}}}
		o.Kind, o.Namespace, o.Name = store.KindServiceEntry, ns, name
		return o
	}
	labelled := func(o *store.Object, app string) *store.Object {
		o.Spec.(*networking.WorkloadEntry).Labels = map[string]string{"app": app}
		return o
	}
	fileWE := labelled(we("ns", "vm-1", "10.0.0.1", store.Origin{File: "cfg/vm.yaml", Line: 1}), "web")
	if err := s.Replace(files, []*store.Object{fileWE}); err != nil {
		t.Fatal(err)
	}
	fresh := func() []store.ConfigError { return analysis.Analyze(model.Build(s.Snapshot()), true) }
	codes := func(ws []store.ConfigError) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.Code+" "+w.Object)
		}
		slices.Sort(out)
		return out
	}
	check := func(step string, want []string) {
		t.Helper()
		got := cache.Analysis(s.Snapshot())
		if !reflect.DeepEqual(codes(got), codes(fresh())) {
			t.Fatalf("%s: cached analysis %v, fresh %v", step, codes(got), codes(fresh()))
		}
		if !slices.Equal(codes(got), want) {
			t.Fatalf("%s: analysis %v, want %v", step, codes(got), want)
		}
	}
	unselected := store.CodeWorkloadEntryUnselected + " WorkloadEntry/ns/vm-1"
	check("a file's entry no ServiceEntry selects", []string{unselected})

	// Registry entries come and go: nothing the analysis reads.
	regObjs := []*store.Object{labelled(we("ns", "p-1", "10.1.0.1", store.Origin{}), "api")}
	if err := s.Replace(reg, regObjs); err != nil {
		t.Fatal(err)
	}
	check("a registry entry added", []string{unselected})
	if err := s.Update(reg, []*store.Object{labelled(we("ns", "p-1", "10.1.0.2", store.Origin{}), "api")}, nil); err != nil {
		t.Fatal(err)
	}
	check("a registry entry moved", []string{unselected})

	// A registry ServiceEntry selecting the file's entry clears it.
	if err := s.Update(reg, []*store.Object{se("ns", "web", "web", store.Origin{})}, nil); err != nil {
		t.Fatal(err)
	}
	check("a registry ServiceEntry selects it", nil)

	// The file's entry relabelled: selected by none again.
	if err := s.Replace(files, []*store.Object{labelled(we("ns", "vm-1", "10.0.0.1", store.Origin{File: "cfg/vm.yaml", Line: 1}), "batch")}); err != nil {
		t.Fatal(err)
	}
	check("the file's entry relabelled", []string{unselected})
}

// A config source's file that failed to decode and holds no object holds
// back the findings a missing object causes, said once (VM2007); once
// it decodes they are back (issue 45).
func TestCacheHoldsBackCascadeOfABrokenFile(t *testing.T) {
	st := store.NewStore()
	src := store.Source{Name: "dir:/x", Class: store.ClassConfig}
	we := &store.Object{Key: store.Key{Kind: store.KindWorkloadEntry, Namespace: "demo", Name: "a"},
		Spec:   &networking.WorkloadEntry{Address: "10.0.0.1", Labels: map[string]string{"app": "a"}},
		Origin: store.Origin{Source: src.Name, File: "workloads.yaml", Line: 1}}
	if err := st.Replace(src, []*store.Object{we}); err != nil {
		t.Fatal(err)
	}
	st.SetStatus(src, "", []store.ConfigError{{File: "services.yaml", Line: 3, Message: "invalid YAML"}})
	c := analysis.NewCache(model.DefaultMesh())
	codes := func() []string {
		var out []string
		for _, w := range c.Analysis(st.Snapshot()) {
			out = append(out, w.Code)
		}
		return out
	}
	if got := codes(); len(got) != 1 || got[0] != store.CodeAnalysisHeldBack {
		t.Errorf("with services.yaml broken: %v, want one VM2007", got)
	}
	st.SetStatus(src, "", nil)
	if got := codes(); len(got) != 1 || got[0] != store.CodeWorkloadEntryUnselected {
		t.Errorf("with services.yaml fixed (and empty): %v, want VM2003", got)
	}
}

// TestCacheFollowsGatewayVMs: a gateway VM's agent registers its
// WorkloadEntry (no file: the ConfigRevision stays), and the cached
// analysis follows it: VM1008 on the Gateway and VM1009 on the
// VirtualService bound only to it go when the VM registers and come back
// when it leaves (issue 43: they remain only for Gateways no VM serves).
func TestCacheFollowsGatewayVMs(t *testing.T) {
	s := store.NewStore()
	files := store.Source{Name: "dir:/cfg", Class: store.ClassConfig}
	agents := store.Source{Name: "autoregister", Class: store.ClassRegistry}
	gw := &store.Object{APIVersion: "networking.istio.io/v1", Origin: store.Origin{File: "gw.yaml", Line: 1}, Spec: &networking.Gateway{
		Selector: map[string]string{"istio": "ingressgateway"},
		Servers:  []*networking.Server{{Port: &networking.Port{Number: 8080, Name: "http", Protocol: "HTTP"}, Hosts: []string{"web.example.com"}}}}}
	gw.Kind, gw.Namespace, gw.Name = store.KindGateway, "edge", "web"
	vs := &store.Object{APIVersion: "networking.istio.io/v1", Origin: store.Origin{File: "vs.yaml", Line: 1}, Spec: &networking.VirtualService{
		Hosts: []string{"web.example.com"}, Gateways: []string{"edge/web"},
		Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "web.example.com"}}}}}}}
	vs.Kind, vs.Namespace, vs.Name = store.KindVirtualService, "edge", "web"
	if err := s.Replace(files, []*store.Object{gw, vs}); err != nil {
		t.Fatal(err)
	}
	cache := analysis.NewCache(model.DefaultMesh())
	gatewayCodes := func() []string {
		var out []string
		for _, w := range cache.Analysis(s.Snapshot()) {
			if w.Code == store.CodeGatewayNotServed || w.Code == store.CodeGatewayOnlyRoutes {
				out = append(out, w.Code)
			}
		}
		slices.Sort(out)
		return out
	}
	want := []string{store.CodeGatewayNotServed, store.CodeGatewayOnlyRoutes}
	if got := gatewayCodes(); !slices.Equal(got, want) {
		t.Fatalf("no gateway VM: %v, want %v", got, want)
	}
	rev := s.Snapshot().ConfigRevision()
	vm := we("edge", "ingress-10.0.0.9", "10.0.0.9", store.Origin{})
	vm.Spec.(*networking.WorkloadEntry).Labels = map[string]string{"istio": "ingressgateway"}
	if err := s.Replace(agents, []*store.Object{vm}); err != nil {
		t.Fatal(err)
	}
	if s.Snapshot().ConfigRevision() != rev {
		t.Fatalf("a registered WorkloadEntry moved the ConfigRevision: the test no longer covers the cache")
	}
	if got := gatewayCodes(); len(got) != 0 {
		t.Errorf("the gateway VM registered: %v, want no VM1008/VM1009", got)
	}
	if err := s.Replace(agents, nil); err != nil {
		t.Fatal(err)
	}
	if got := gatewayCodes(); !slices.Equal(got, want) {
		t.Errorf("the gateway VM left: %v, want %v", got, want)
	}
}

// TestAnalysisUsesTheFeedsModel runs a model.Feed on a Store and a Cache
// taking its models (ModelsFrom, as the control plane wires them): through a
// full build and endpoint-only rebuilds, the cached analysis equals a fresh
// Analyze of a full build of the same snapshot, and it was computed on the
// Feed's model of that snapshot, not on a model built again.
func TestAnalysisUsesTheFeedsModel(t *testing.T) {
	s := store.NewStore()
	files := store.Source{Name: "dir:/cfg", Class: store.ClassConfig}
	feed, err := model.NewFeed(s, model.FeedSettings{DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	built := make(chan *model.Snapshot, 16)
	go func() { _ = feed.Run(ctx, func(u model.Update) { built <- u.Snapshot }) }()
	waitBuilt := func(rev int64) {
		t.Helper()
		for m := range built {
			if m.Revision == rev {
				return
			}
		}
	}
	var offered, matched int
	cache := analysis.NewCache(model.DefaultMesh())
	cache.ModelsFrom(func() *model.Snapshot {
		m := feed.Latest()
		offered++
		if m != nil && m.Revision == s.Snapshot().Revision {
			matched++
		}
		return m
	})
	waitBuilt(s.Snapshot().Revision)

	svc := &store.Object{APIVersion: "networking.istio.io/v1", Origin: store.Origin{File: "cfg/se.yaml", Line: 1}, Spec: &networking.ServiceEntry{
		Hosts: []string{"web.example"}, Resolution: networking.ServiceEntry_STATIC,
		Ports:            []*networking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "web"}}}}
	svc.Kind, svc.Namespace, svc.Name = store.KindServiceEntry, "ns", "web"
	selecting := func(app string) *store.Object {
		o := *svc
		spec := proto.Clone(svc.Spec.(*networking.ServiceEntry)).(*networking.ServiceEntry)
		spec.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": app}}
		o.Spec = spec
		return &o
	}
	vs := &store.Object{APIVersion: "networking.istio.io/v1", Origin: store.Origin{File: "cfg/vs.yaml", Line: 1}, Spec: &networking.VirtualService{
		Hosts: []string{"web.example"},
		Http:  []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "web.example"}}}}}}}
	vs.Kind, vs.Namespace, vs.Name = store.KindVirtualService, "ns", "web"
	entry := func(addr, app string) *store.Object {
		o := we("ns", "vm-1", addr, store.Origin{File: "cfg/vm.yaml", Line: 1})
		o.Spec.(*networking.WorkloadEntry).Labels = map[string]string{"app": app}
		return o
	}
	steps := []struct {
		name    string
		upserts []*store.Object
		want    []string
	}{
		{"a ServiceEntry and the entry it selects (full build)", []*store.Object{svc, entry("10.0.0.1", "web")}, nil},
		{"the entry moves (endpoints rebuilt)", []*store.Object{entry("10.0.0.2", "web")}, nil},
		{"the entry leaves the selector (endpoints rebuilt)", []*store.Object{entry("10.0.0.2", "api")},
			[]string{store.CodeWorkloadEntryUnselected + " WorkloadEntry/ns/vm-1"}},
		{"the entry is selected again", []*store.Object{entry("10.0.0.3", "web")}, nil},
		{"a VirtualService (routing rebuilt, the same selectors)", []*store.Object{vs}, nil},
		{"the ServiceEntry now selects app=api: the entry, unchanged, is unselected", []*store.Object{selecting("api")},
			[]string{store.CodeWorkloadEntryUnselected + " WorkloadEntry/ns/vm-1"}},
		{"and app=web again", []*store.Object{selecting("web")}, nil},
	}
	codes := func(ws []store.ConfigError) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.Code+" "+w.Object)
		}
		slices.Sort(out)
		return out
	}
	for _, step := range steps {
		if err := s.Update(files, step.upserts, nil); err != nil {
			t.Fatal(err)
		}
		snap := s.Snapshot()
		waitBuilt(snap.Revision)
		before := matched
		got := codes(cache.Analysis(snap))
		fresh := codes(analysis.Analyze(model.Build(snap), true))
		if !slices.Equal(got, fresh) || !slices.Equal(got, step.want) {
			t.Fatalf("%s: analysis %v, fresh %v, want %v", step.name, got, fresh, step.want)
		}
		if matched != before+1 {
			t.Fatalf("%s: the analysis did not take the Feed's model of revision %d (offered %d, matched %d)", step.name, snap.Revision, offered, matched)
		}
	}
}
