package store_test

import (
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/store"
)

func we(ns, name, addr string, origin store.Origin) *store.Object {
	o := &store.Object{APIVersion: "networking.istio.io/v1", Spec: &networking.WorkloadEntry{Address: addr}, Origin: origin}
	o.Kind, o.Namespace, o.Name = store.KindWorkloadEntry, ns, name
	return o
}

func TestStoreReplaceDiffsAndNotifies(t *testing.T) {
	s := store.NewStore()
	sub := s.Subscribe()
	defer sub.Close()
	src := store.Source{Name: "dir:/a", Class: store.ClassConfig}
	a, b := we("ns", "a", "1.1.1.1", store.Origin{}), we("ns", "b", "1.1.1.2", store.Origin{})
	if err := s.Replace(src, []*store.Object{a, b}); err != nil {
		t.Fatal(err)
	}
	snap1 := s.Snapshot()
	if snap1.Revision != 1 || snap1.Len() != 2 || len(snap1.List(store.KindWorkloadEntry)) != 2 {
		t.Fatalf("snapshot after first replace: rev %d len %d", snap1.Revision, snap1.Len())
	}
	<-sub.C()
	if ch := sub.Take(); len(ch.Keys) != 2 || ch.Revision != 1 {
		t.Fatalf("changes: %+v", ch)
	}

	// Same content in new objects: no revision, no event.
	if err := s.Replace(src, []*store.Object{we("ns", "a", "1.1.1.1", store.Origin{}), b}); err != nil {
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
	a2 := we("ns", "a", "9.9.9.9", store.Origin{})
	if err := s.Replace(src, []*store.Object{a2}); err != nil {
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
	s := store.NewStore()
	src := store.Source{Name: "x"}
	err := s.Replace(src, []*store.Object{we("ns", "a", "1.1.1.1", store.Origin{File: "a.yaml", Line: 1}), we("ns", "a", "1.1.1.2", store.Origin{File: "b.yaml", Line: 3})})
	if err == nil || s.Snapshot().Len() != 0 {
		t.Fatalf("duplicate accepted: %v", err)
	}
	// The error names the first definition, then the second.
	if i, j := strings.Index(err.Error(), "a.yaml"), strings.Index(err.Error(), "b.yaml"); i < 0 || j < i {
		t.Fatalf("error %q does not name a.yaml, then b.yaml", err)
	}
}

func TestStoreConflictFilesBeatRegistries(t *testing.T) {
	s := store.NewStore()
	reg := store.Source{Name: "registry:consul", Class: store.ClassRegistry}
	dir := store.Source{Name: "dir:/etc/vmesh", Class: store.ClassConfig}
	fromReg := we("ns", "a", "10.0.0.1", store.Origin{Source: reg.Name, Registry: "consul/a"})
	fromFile := we("ns", "a", "10.0.0.2", store.Origin{Source: dir.Name, File: "a.yaml", Line: 1})
	if err := s.Replace(reg, []*store.Object{fromReg}); err != nil {
		t.Fatal(err)
	}
	if s.Snapshot().Get(fromReg.Key) != fromReg {
		t.Fatal("registry object not served alone")
	}
	if err := s.Replace(dir, []*store.Object{fromFile}); err != nil {
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
	other := store.Source{Name: "dir:/a", Class: store.ClassConfig}
	fromOther := we("ns", "a", "10.0.0.3", store.Origin{Source: other.Name})
	_ = s.Replace(dir, []*store.Object{fromFile})
	_ = s.Replace(other, []*store.Object{fromOther})
	if s.Snapshot().Get(fromFile.Key) != fromOther {
		t.Fatal("tie not broken by source name")
	}
}

func TestStoreStatus(t *testing.T) {
	s := store.NewStore()
	src := store.Source{Name: "git:repo", Class: store.ClassConfig}
	s.SetStatus(src, "0123456789abcdef", []store.ConfigError{{File: "a.yaml", Line: 3, Message: "bad"}})
	snap := s.Snapshot()
	if snap.Commit() != "0123456789abcdef" || len(snap.Sources) != 1 || len(snap.Sources[0].Errors) != 1 {
		t.Fatalf("status: %+v", snap.Sources)
	}
}

// A git source's objects and commit change in one snapshot (UpdateWithStatus);
// SnapshotWith shows the Store with the source at another commit while the
// Store itself and its subscribers are untouched.
func TestStoreUpdateWithCommitAndSnapshotWith(t *testing.T) {
	s := store.NewStore()
	git := store.Source{Name: "git:repo", Class: store.ClassConfig}
	reg := store.Source{Name: "registry:consul", Class: store.ClassRegistry}
	a := we("default", "a", "10.0.0.1", store.Origin{Source: git.Name, Commit: "aaaa"})
	if err := s.UpdateWithStatus(git, []*store.Object{a}, nil, store.StatusChange{Revision: "aaaa"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Replace(reg, []*store.Object{we("default", "r", "10.0.0.9", store.Origin{Source: reg.Name})}); err != nil {
		t.Fatal(err)
	}
	good, rev := s.SourceObjects(git.Name)
	if rev != "aaaa" || len(good) != 1 {
		t.Fatalf("SourceObjects = %d objects at %q", len(good), rev)
	}
	sub := s.Subscribe()
	defer sub.Close()
	b := we("default", "b", "10.0.0.2", store.Origin{Source: git.Name, Commit: "bbbb"})
	if err := s.UpdateWithStatus(git, []*store.Object{b}, []store.Key{a.Key}, store.StatusChange{Revision: "bbbb"}); err != nil {
		t.Fatal(err)
	}
	cur := s.Snapshot()
	if cur.Commit() != "bbbb" || cur.Get(b.Key) == nil || cur.Get(a.Key) != nil {
		t.Fatalf("after UpdateWithStatus: commit %q, b %v, a %v", cur.Commit(), cur.Get(b.Key), cur.Get(a.Key))
	}
	<-sub.C()
	sub.Take()
	old := s.SnapshotWith(git.Name, good, "aaaa")
	if old.Commit() != "aaaa" || old.Get(a.Key) == nil || old.Get(b.Key) != nil || old.Revision != cur.Revision {
		t.Errorf("SnapshotWith: commit %q, a %v, b %v, revision %d (store %d)", old.Commit(), old.Get(a.Key), old.Get(b.Key), old.Revision, cur.Revision)
	}
	if len(old.List(store.KindWorkloadEntry)) != 2 {
		t.Errorf("SnapshotWith lost the registry's object: %d WorkloadEntries", len(old.List(store.KindWorkloadEntry)))
	}
	if s.Snapshot() != cur {
		t.Error("SnapshotWith changed the Store")
	}
	select {
	case <-sub.C():
		t.Error("SnapshotWith notified subscribers")
	default:
	}
}

// ReplaceWithStatus and UpdateWithStatus change a source's objects and its
// problems in one snapshot: the next snapshot holds both, and no snapshot
// in between holds one without the other.
func TestStoreObjectsAndStatusInOneSnapshot(t *testing.T) {
	s := store.NewStore()
	src := store.Source{Name: "jwks", Class: store.ClassConfig}
	a := we("default", "a", "10.0.0.1", store.Origin{Source: src.Name})
	warn := store.ConfigError{File: "a.yaml", Line: 2, Field: "spec", Severity: store.SeverityWarning, Code: "VM1012", Message: "about a"}
	bad := store.ConfigError{File: "b.yaml", Line: 3, Message: "bad b"}

	before := s.Snapshot().Revision
	if err := s.ReplaceWithStatus(src, []*store.Object{a}, store.StatusChange{Problems: []store.ConfigError{warn, bad}, Held: "b.yaml's last good objects"}); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	if snap.Revision != before+1 {
		t.Fatalf("ReplaceWithStatus published %d snapshots, want 1", snap.Revision-before)
	}
	if snap.Get(a.Key) == nil || len(snap.Sources) != 1 {
		t.Fatalf("after ReplaceWithStatus: a %v, sources %+v", snap.Get(a.Key), snap.Sources)
	}
	st := snap.Sources[0]
	if len(st.Warnings) != 1 || st.Warnings[0].Code != "VM1012" || len(st.Errors) != 1 || st.Errors[0].Message != "bad b" || st.Held == "" || st.Objects != 1 {
		t.Fatalf("status after ReplaceWithStatus: %+v", st)
	}

	b := we("default", "b", "10.0.0.2", store.Origin{Source: src.Name})
	before = snap.Revision
	if err := s.UpdateWithStatus(src, []*store.Object{b}, []store.Key{a.Key}, store.StatusChange{Revision: "r2"}); err != nil {
		t.Fatal(err)
	}
	snap = s.Snapshot()
	if snap.Revision != before+1 {
		t.Fatalf("UpdateWithStatus published %d snapshots, want 1", snap.Revision-before)
	}
	st = snap.Sources[0]
	if snap.Get(b.Key) == nil || snap.Get(a.Key) != nil || len(st.Warnings)+len(st.Errors) != 0 || st.Held != "" || st.Revision != "r2" || st.Objects != 1 {
		t.Fatalf("after UpdateWithStatus: b %v, a %v, status %+v", snap.Get(b.Key), snap.Get(a.Key), st)
	}

	// A refused set changes neither the objects nor the status.
	before = snap.Revision
	if err := s.ReplaceWithStatus(src, []*store.Object{a, a}, store.StatusChange{Problems: []store.ConfigError{bad}}); err == nil {
		t.Fatal("a key named twice was accepted")
	}
	if after := s.Snapshot(); after.Revision != before || len(after.Sources[0].Errors) != 0 {
		t.Fatalf("a refused set published: revision %d → %d, status %+v", before, after.Revision, after.Sources[0])
	}
}
