package filestore_test

import (
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/filestore"
)

func we(ns, name, addr string, origin filestore.Origin) *filestore.Object {
	o := &filestore.Object{APIVersion: "networking.istio.io/v1", Spec: &networking.WorkloadEntry{Address: addr}, Origin: origin}
	o.Kind, o.Namespace, o.Name = filestore.KindWorkloadEntry, ns, name
	return o
}

func TestStoreReplaceDiffsAndNotifies(t *testing.T) {
	s := filestore.NewStore()
	sub := s.Subscribe()
	defer sub.Close()
	src := filestore.Source{Name: "dir:/a", Class: filestore.ClassConfig}
	a, b := we("ns", "a", "1.1.1.1", filestore.Origin{}), we("ns", "b", "1.1.1.2", filestore.Origin{})
	if err := s.Replace(src, []*filestore.Object{a, b}); err != nil {
		t.Fatal(err)
	}
	snap1 := s.Snapshot()
	if snap1.Revision != 1 || snap1.Len() != 2 || len(snap1.List(filestore.KindWorkloadEntry)) != 2 {
		t.Fatalf("snapshot after first replace: rev %d len %d", snap1.Revision, snap1.Len())
	}
	<-sub.C()
	if ch := sub.Take(); len(ch.Keys) != 2 || ch.Revision != 1 {
		t.Fatalf("changes: %+v", ch)
	}

	// Same content in new objects: no revision, no event.
	if err := s.Replace(src, []*filestore.Object{we("ns", "a", "1.1.1.1", filestore.Origin{}), b}); err != nil {
		t.Fatal(err)
	}
	if s.Snapshot().Revision != 1 {
		t.Fatalf("identical content bumped the revision")
	}
	select {
	case <-sub.C():
		t.Fatalf("event for identical content: %+v", sub.Take())
	default:
	}

	// Change a, drop b.
	a2 := we("ns", "a", "9.9.9.9", filestore.Origin{})
	if err := s.Replace(src, []*filestore.Object{a2}); err != nil {
		t.Fatal(err)
	}
	<-sub.C()
	ch := sub.Take()
	if ch.Revision != 2 || len(ch.Keys) != 2 {
		t.Fatalf("changes: %+v", ch)
	}
	snap2 := s.Snapshot()
	if snap2.Get(a2.Key) != a2 || snap2.Get(b.Key) != nil || snap2.Len() != 1 {
		t.Fatalf("snapshot 2 wrong")
	}
	// The older snapshot is untouched.
	if snap1.Get(b.Key) != b || snap1.Len() != 2 || snap1.Revision != 1 {
		t.Fatalf("old snapshot was modified")
	}
}

func TestStoreRejectsDuplicateKeys(t *testing.T) {
	s := filestore.NewStore()
	src := filestore.Source{Name: "x"}
	err := s.Replace(src, []*filestore.Object{we("ns", "a", "1.1.1.1", filestore.Origin{File: "a.yaml", Line: 1}), we("ns", "a", "1.1.1.2", filestore.Origin{File: "b.yaml", Line: 3})})
	if err == nil || s.Snapshot().Len() != 0 {
		t.Fatalf("duplicate accepted: %v", err)
	}
	// The error names the first definition, then the second.
	if i, j := strings.Index(err.Error(), "a.yaml"), strings.Index(err.Error(), "b.yaml"); i < 0 || j < i {
		t.Fatalf("error %q does not name a.yaml, then b.yaml", err)
	}
}

func TestStoreConflictFilesBeatRegistries(t *testing.T) {
	s := filestore.NewStore()
	reg := filestore.Source{Name: "registry:consul", Class: filestore.ClassRegistry}
	dir := filestore.Source{Name: "dir:/etc/vmesh", Class: filestore.ClassConfig}
	fromReg := we("ns", "a", "10.0.0.1", filestore.Origin{Source: reg.Name, Registry: "consul/a"})
	fromFile := we("ns", "a", "10.0.0.2", filestore.Origin{Source: dir.Name, File: "a.yaml", Line: 1})
	if err := s.Replace(reg, []*filestore.Object{fromReg}); err != nil {
		t.Fatal(err)
	}
	if s.Snapshot().Get(fromReg.Key) != fromReg {
		t.Fatal("registry object not served alone")
	}
	if err := s.Replace(dir, []*filestore.Object{fromFile}); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	if snap.Get(fromFile.Key) != fromFile {
		t.Fatal("file did not beat registry")
	}
	if len(snap.Conflicts) != 1 || snap.Conflicts[0].Winner != fromFile.Origin || snap.Conflicts[0].Losers[0] != fromReg.Origin {
		t.Fatalf("conflict not reported with both origins: %+v", snap.Conflicts)
	}
	// Removing the file brings the registry's object back and clears the conflict.
	if err := s.Replace(dir, nil); err != nil {
		t.Fatal(err)
	}
	snap = s.Snapshot()
	if snap.Get(fromReg.Key) != fromReg || len(snap.Conflicts) != 0 {
		t.Fatalf("after file removal: %v %+v", snap.Get(fromReg.Key), snap.Conflicts)
	}
	// Among equal classes the winner is deterministic: the lower name.
	other := filestore.Source{Name: "dir:/a", Class: filestore.ClassConfig}
	fromOther := we("ns", "a", "10.0.0.3", filestore.Origin{Source: other.Name})
	_ = s.Replace(dir, []*filestore.Object{fromFile})
	_ = s.Replace(other, []*filestore.Object{fromOther})
	if s.Snapshot().Get(fromFile.Key) != fromOther {
		t.Fatal("tie not broken by source name")
	}
}

func TestStoreStatus(t *testing.T) {
	s := filestore.NewStore()
	src := filestore.Source{Name: "git:repo", Class: filestore.ClassConfig}
	s.SetStatus(src, "0123456789abcdef", []filestore.ConfigError{{File: "a.yaml", Line: 3, Message: "bad"}})
	snap := s.Snapshot()
	if snap.Commit() != "0123456789abcdef" || len(snap.Sources) != 1 || len(snap.Sources[0].Errors) != 1 {
		t.Fatalf("status: %+v", snap.Sources)
	}
}
