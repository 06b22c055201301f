package filestore_test

import (
	"reflect"
	"slices"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/filestore"
)

// TestAnalysisFollowsWhatItReads checks the Store's cached analysis: a
// registry's WorkloadEntry changes (which the analysis does not read) keep
// it, and it equals a fresh Analyze of every snapshot; a change to a file's
// WorkloadEntry or a ServiceEntry shows at once.
func TestAnalysisFollowsWhatItReads(t *testing.T) {
	s := filestore.NewStore()
	files := filestore.Source{Name: "dir:/cfg", Class: filestore.ClassConfig}
	reg := filestore.Source{Name: "registry:zk", Class: filestore.ClassRegistry}
	se := func(ns, name, app string, origin filestore.Origin) *filestore.Object {
		o := &filestore.Object{APIVersion: "networking.istio.io/v1", Origin: origin, Spec: &networking.ServiceEntry{
			Hosts: []string{name + ".example"}, Resolution: networking.ServiceEntry_STATIC,
			Ports:            []*networking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": app}}}}
		o.Kind, o.Namespace, o.Name = filestore.KindServiceEntry, ns, name
		return o
	}
	labelled := func(o *filestore.Object, app string) *filestore.Object {
		o.Spec.(*networking.WorkloadEntry).Labels = map[string]string{"app": app}
		return o
	}
	fileWE := labelled(we("ns", "vm-1", "10.0.0.1", filestore.Origin{File: "cfg/vm.yaml", Line: 1}), "web")
	if err := s.Replace(files, []*filestore.Object{fileWE}); err != nil {
		t.Fatal(err)
	}
	fresh := func() []filestore.ConfigError {
		snap := s.Snapshot()
		var objs []*filestore.Object
		for _, k := range filestore.Kinds {
			objs = append(objs, snap.List(k)...)
		}
		return filestore.Analyze(objs, true)
	}
	codes := func(ws []filestore.ConfigError) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.Code+" "+w.Object)
		}
		slices.Sort(out)
		return out
	}
	check := func(step string, want []string) {
		t.Helper()
		got := s.Analysis(s.Snapshot())
		if !reflect.DeepEqual(codes(got), codes(fresh())) {
			t.Fatalf("%s: cached analysis %v, fresh %v", step, codes(got), codes(fresh()))
		}
		if !slices.Equal(codes(got), want) {
			t.Fatalf("%s: analysis %v, want %v", step, codes(got), want)
		}
	}
	unselected := filestore.CodeWorkloadEntryUnselected + " WorkloadEntry/ns/vm-1"
	check("a file's entry no ServiceEntry selects", []string{unselected})

	// Registry entries come and go: nothing the analysis reads.
	regObjs := []*filestore.Object{labelled(we("ns", "p-1", "10.1.0.1", filestore.Origin{}), "api")}
	if err := s.Replace(reg, regObjs); err != nil {
		t.Fatal(err)
	}
	check("a registry entry added", []string{unselected})
	if err := s.Update(reg, []*filestore.Object{labelled(we("ns", "p-1", "10.1.0.2", filestore.Origin{}), "api")}, nil); err != nil {
		t.Fatal(err)
	}
	check("a registry entry moved", []string{unselected})

	// A registry ServiceEntry selecting the file's entry clears it.
	if err := s.Update(reg, []*filestore.Object{se("ns", "web", "web", filestore.Origin{})}, nil); err != nil {
		t.Fatal(err)
	}
	check("a registry ServiceEntry selects it", nil)

	// The file's entry relabelled: selected by none again.
	if err := s.Replace(files, []*filestore.Object{labelled(we("ns", "vm-1", "10.0.0.1", filestore.Origin{File: "cfg/vm.yaml", Line: 1}), "batch")}); err != nil {
		t.Fatal(err)
	}
	check("the file's entry relabelled", []string{unselected})
}
