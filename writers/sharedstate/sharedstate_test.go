package sharedstate_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/go-zookeeper/zk"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

var localSource = store.Source{Name: sharedstate.LocalSource, Class: store.ClassRegistration}

// replica is one replica's Store, CA and State, its backend reached
// through a proxy the test can cut (a replica that dies, or loses its
// network, without any cleanup).
type replica struct {
	id    string
	store *store.Store
	ca    *ca.CA
	state *sharedstate.State
	proxy *testenv.Proxy
	stop  context.CancelFunc
	done  chan error
}

func startReplica(t testing.TB, id string, spec sharedstate.Spec, target string) *replica {
	t.Helper()
	authority, err := ca.New(ca.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, store: store.NewStore(), ca: authority, done: make(chan error, 1)}
	r.proxy = testenv.StartProxy(t, target)
	spec.Address = r.proxy.Addr
	r.state, err = sharedstate.New(r.store, sharedstate.Config{Spec: spec, ID: id, CA: authority, Key: testKey(t), Heartbeat: 500 * time.Millisecond,
		Describe: func() sharedstate.Replica { return sharedstate.Replica{XDSAddr: "xds-of-" + id} }}, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { r.done <- r.state.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("replica %s: %v", id, err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("replica %s did not stop", id)
		}
	})
	return r
}

// testKey is the state key every replica of a test holds.
func testKey(t testing.TB) sharedstate.Key {
	t.Helper()
	k, err := sharedstate.NewKey([]byte("0123456789abcdef0123456789abcdef-test-state-key"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func logger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

func entry(ns, name, ip string, healthy bool) *store.Object {
	return &store.Object{
		Key:        store.Key{Kind: store.KindWorkloadEntry, Namespace: ns, Name: name},
		APIVersion: "networking.istio.io/v1", Labels: map[string]string{"app": "ledger"},
		Annotations: map[string]string{"vmesh.io/registry": "agent"},
		Spec:        &networking.WorkloadEntry{Address: ip, Labels: map[string]string{"app": "ledger"}, Ports: map[string]uint32{"grpc": 7070}},
		Healthy:     &healthy,
		Origin:      store.Origin{Source: sharedstate.LocalSource, Registry: "agent vm-1 (group ledger)"},
	}
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func TestConsulSharedState(t *testing.T) {
	c := testenv.StartConsul(t)
	testSharedState(t, sharedstate.Spec{Type: sharedstate.TypeConsul, Prefix: "vmesh-test", TTL: 10 * time.Second}, c.HTTPAddr)
}

func TestZooKeeperSharedState(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	testSharedState(t, sharedstate.Spec{Type: sharedstate.TypeZooKeeper, Prefix: "vmesh/test", TTL: 2 * time.Second}, z.Addr)
}

// testSharedState: a registration through A is served by B and C with its
// health and an origin naming A; the same VM registering through B again is
// one entry (B's own wins on B, the newest elsewhere); a token revoked
// through B is refused by A's and C's CAs; the replicas are listed; when A
// dies without cleanup its entries go once its session expires, not before.
func testSharedState(t *testing.T, spec sharedstate.Spec, target string) {
	a := startReplica(t, "A", spec, target)
	b := startReplica(t, "B", spec, target)
	c := startReplica(t, "C", spec, target)
	for _, r := range []*replica{a, b, c} {
		select {
		case <-r.state.Synced():
		case <-time.After(30 * time.Second):
			t.Fatalf("replica %s never read the shared state", r.id)
		}
	}
	key := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "ledger-10.0.0.7"}
	served := func(r *replica, from string, healthy bool) func() bool {
		return func() bool {
			o := r.store.Snapshot().Get(key)
			return o != nil && o.Origin.Source == sharedstate.Source.Name && o.Annotations["vmesh.io/replica"] == from &&
				strings.HasPrefix(o.Origin.Registry, "replica "+from+": agent vm-1") &&
				o.Healthy != nil && *o.Healthy == healthy && o.Spec.(*networking.WorkloadEntry).GetAddress() == "10.0.0.7"
		}
	}

	// Registered through A: B and C serve it within 2s.
	if err := a.store.Replace(localSource, []*store.Object{entry("fin", "ledger-10.0.0.7", "10.0.0.7", true)}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*replica{b, c} {
		took := eventually(t, 2*time.Second, "replica "+r.id+" serves A's registration", served(r, "A", true))
		t.Logf("A → %s: %s", r.id, took)
	}
	if got := a.store.Snapshot().Get(key); got == nil || got.Origin.Source != sharedstate.LocalSource {
		t.Fatalf("A's own entry lost or replaced on A: %+v", got)
	}
	// Its health follows.
	if err := a.store.Replace(localSource, []*store.Object{entry("fin", "ledger-10.0.0.7", "10.0.0.7", false)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "C sees A's health report", served(c, "A", false))

	// The agent registers through B too (it failed over): one entry
	// everywhere, no conflict; B serves its own, C the newest (B's).
	if err := b.store.Replace(localSource, []*store.Object{entry("fin", "ledger-10.0.0.7", "10.0.0.7", true)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "C serves B's newer registration", served(c, "B", true))
	eventually(t, 2*time.Second, "A serves its own registration without a conflict", func() bool {
		snap := a.store.Snapshot()
		o := snap.Get(key)
		return o != nil && o.Origin.Source == sharedstate.LocalSource && len(snap.Conflicts) == 0
	})
	if snap := b.store.Snapshot(); snap.Get(key).Origin.Source != sharedstate.LocalSource || len(snap.Conflicts) != 0 {
		t.Fatalf("B: %+v, conflicts %+v", snap.Get(key).Origin, snap.Conflicts)
	}
	// B drops it (its agent went back to A): C serves A's again.
	if err := b.store.Replace(localSource, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "C serves A's registration again", served(c, "A", false))
	eventually(t, 2*time.Second, "B serves A's registration", served(b, "A", false))

	// A token revoked through B is refused by A's and C's CAs within 5s.
	tokA, claimsA, err := a.ca.CreateToken(ca.TokenRequest{Namespace: "fin", ServiceAccount: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	tokC, claimsC, err := c.ca.CreateToken(ca.TokenRequest{Namespace: "fin", ServiceAccount: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	for _, rq := range []ca.RevokeRequest{{Token: claimsA.ID, Reason: "lost"}, {Token: claimsC.ID, Reason: "lost"}, {Identity: "spiffe://cluster.local/ns/fin/sa/old", Reason: "gone"}} {
		rv, err := b.ca.NewRevocation(rq)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.state.Revoke(context.Background(), rv); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []struct {
		r   *replica
		tok string
	}{{a, tokA}, {c, tokC}} {
		took := eventually(t, 5*time.Second, "replica "+x.r.id+" refuses the token revoked through B", func() bool {
			_, err := x.r.ca.VerifyToken(x.tok)
			return err != nil && strings.Contains(err.Error(), "revoked")
		})
		t.Logf("revocation B → %s: %s", x.r.id, took)
	}
	eventually(t, 5*time.Second, "B applied its own revocations", func() bool { return len(b.ca.Revoked()) == 3 })
	// A revocation made on A's own CA (vmesh ca revoke --data-dir on A's
	// host) is shared too: C refuses the token within 5s.
	tokC2, claimsC2, err := c.ca.CreateToken(ca.TokenRequest{Namespace: "fin", ServiceAccount: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ca.RevokeToken(claimsC2.ID, "revoked on A's host"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "C refuses the token revoked on A's own CA", func() bool {
		_, err := c.ca.VerifyToken(tokC2)
		return err != nil && strings.Contains(err.Error(), "revoked")
	})

	// Every replica's record is listed, with its address.
	eventually(t, 5*time.Second, "the three replicas listed", func() bool {
		rs, err := b.state.Replicas(context.Background())
		return err == nil && len(rs) == 3 && rs[0].ID == "A" && rs[0].XDSAddr == "xds-of-A" && rs[1].Self && !rs[0].Self
	})

	// A dies without any cleanup: its session must expire. Until then B
	// and C keep serving its entry; after it, the entry and the record go.
	a.proxy.Cut()
	cut := time.Now()
	limit := 2*spec.TTL + 5*time.Second
	took := eventually(t, limit, "A's registration gone from C after its session expired", func() bool { return c.store.Snapshot().Get(key) == nil })
	t.Logf("A's registration expired %s after A was cut (ttl %s)", took, spec.TTL)
	if took < spec.TTL/2 {
		t.Fatalf("A's entry went after %s: before its session could expire (ttl %s)", took, spec.TTL)
	}
	eventually(t, time.Until(cut.Add(limit)), "A's registration gone from B", func() bool { return b.store.Snapshot().Get(key) == nil })
	eventually(t, 5*time.Second, "A's record gone", func() bool {
		rs, err := c.state.Replicas(context.Background())
		return err == nil && len(rs) == 2 && rs[0].ID == "B" && rs[1].ID == "C"
	})

	// A comes back (the network returns): a new session, and its
	// registration is written again.
	a.proxy.Restore()
	eventually(t, limit, "A's registration written again after a new session", served(c, "A", false))
}

// TestSpecs: the --state flag and the validation.
func TestSpecs(t *testing.T) {
	for _, tc := range []struct {
		flag, err string
	}{
		{flag: "consul=127.0.0.1:8500"},
		{flag: "zookeeper=zk1:2181,zk2:2181"},
		{flag: "etcd=x:1", err: `type "etcd"`},
		{flag: "consul", err: "want consul=ADDR"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			s, err := sharedstate.ParseFlag(tc.flag)
			if tc.err == "" {
				if err != nil || s.String() != tc.flag {
					t.Fatalf("%q: %+v %v", tc.flag, s, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%q: error %v, want %q", tc.flag, err, tc.err)
			}
		})
	}
	if err := (sharedstate.Spec{Type: "consul", Address: "x:1", TTL: time.Second}).Validate(); err == nil {
		t.Fatal("a consul TTL under 10s was accepted")
	}
	if err := (sharedstate.Spec{Type: "zookeeper", Address: "x:1", TokenFile: "/t"}).Validate(); err == nil {
		t.Fatal("a token file for ZooKeeper, which would be ignored, was accepted")
	}
}

// TestConsulRestartWithTheSameID: a replica restarted under the same ID
// before its old session expired takes its keys over at once instead of
// waiting for the old session's TTL.
func TestConsulRestartWithTheSameID(t *testing.T) {
	c := testenv.StartConsul(t)
	spec := sharedstate.Spec{Type: sharedstate.TypeConsul, Prefix: "vmesh-restart", TTL: 30 * time.Second}
	watcher := startReplica(t, "W", spec, c.HTTPAddr)
	first := startReplica(t, "R", spec, c.HTTPAddr)
	if err := first.store.Replace(localSource, []*store.Object{entry("fin", "vm-a", "10.0.0.1", true)}); err != nil {
		t.Fatal(err)
	}
	keyA := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "vm-a"}
	keyB := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "vm-b"}
	eventually(t, 5*time.Second, "W serves R's first entry", func() bool { return watcher.store.Snapshot().Get(keyA) != nil })
	first.proxy.Cut() // dies without cleanup: its session lives on for up to 60s
	first.stop()
	second := startReplica(t, "R", spec, c.HTTPAddr)
	if err := second.store.Replace(localSource, []*store.Object{entry("fin", "vm-b", "10.0.0.2", true)}); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 10*time.Second, "W serves the restarted R's entry, and not the old one", func() bool {
		snap := watcher.store.Snapshot()
		return snap.Get(keyB) != nil && snap.Get(keyA) == nil
	})
	t.Logf("restarted replica took its keys over after %s (ttl %s)", took, spec.TTL)
	eventually(t, 5*time.Second, "R's record is the restarted one's", func() bool {
		rs, err := watcher.state.Replicas(context.Background())
		return err == nil && len(rs) == 2 && rs[0].ID == "R" && rs[0].Registered == 1
	})
}

// TestUnreadableSharedRecords: a registration and a revocation in the
// shared state that a replica cannot read or refuses (written by hand
// here, with the replicas' ZooKeeper digest: no world access) are skipped,
// listed in its status with their reason and counted
// (vmesh_shared_state_unreadable_records reads State.Unreadable), while
// the readable ones are served; once they are gone, so are the list and
// the counts. A client without the digest can neither read nor write.
func TestUnreadableSharedRecords(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	spec := sharedstate.Spec{Type: sharedstate.TypeZooKeeper, Prefix: "vmesh/unreadable", TTL: 2 * time.Second}
	a := startReplica(t, "A", spec, z.Addr)
	b := startReplica(t, "B", spec, z.Addr)
	key := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "ledger-10.0.0.7"}
	if err := a.store.Replace(localSource, []*store.Object{entry("fin", key.Name, "10.0.0.7", true)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "B serves A's registration", func() bool { return b.store.Snapshot().Get(key) != nil })

	anyone, _, err := zk.Connect([]string{z.Addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer anyone.Close()
	if _, err := anyone.Create("/vmesh/unreadable/registrations/anyone~0000000001", []byte("{}"), 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("a client without the digest created a registration node: %v", err)
	}
	if _, _, err := anyone.Children("/vmesh/unreadable/registrations"); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("a client without the digest listed the registrations: %v", err)
	}
	raw := newZKRaw(t, z.Addr, "vmesh/unreadable", testKey(t))
	conn, open := raw.conn, raw.acl
	for _, n := range []string{"/vmesh/unreadable", "/vmesh/unreadable/replicas", "/vmesh/unreadable/registrations", "/vmesh/unreadable/revocations"} {
		if acl, _, err := conn.GetACL(n); err != nil || len(acl) != 1 || acl[0].Scheme != "digest" || acl[0].Perms != zk.PermAll {
			t.Fatalf("%s's ACL: %+v %v", n, acl, err)
		}
	}
	badEntry, badRevocation := "/vmesh/unreadable/registrations/by-hand~0000000001", "/vmesh/unreadable/revocations/by-hand~0000000001"
	for p, data := range map[string]string{badEntry: `{"replica": "X", "name": `, badRevocation: `{"reason": "names nothing"}`} {
		if _, err := conn.Create(p, []byte(data), 0, open); err != nil {
			t.Fatal(err)
		}
	}
	gauge := func(kind string) float64 { return float64(b.state.Unreadable(kind)) }
	listed := func() []sharedstate.UnreadableRecord { return b.state.Status(context.Background()).Unreadable }
	eventually(t, 10*time.Second, "B lists both unreadable records", func() bool { return len(listed()) == 2 })
	got := listed()
	if got[0].Kind != sharedstate.UnreadableRegistration || got[0].Key != "by-hand~0000000001" || got[0].Reason != sharedstate.ReasonUnreadable ||
		got[1].Kind != sharedstate.UnreadableRevocation || got[1].Reason != sharedstate.ReasonUnsigned || got[1].Key != "by-hand~0000000001" {
		t.Fatalf("unreadable %+v", got)
	}
	if r, v := gauge(sharedstate.UnreadableRegistration), gauge(sharedstate.UnreadableRevocation); r != 1 || v != 1 {
		t.Fatalf("gauges: registrations %v, revocations %v", r, v)
	}
	if b.store.Snapshot().Get(key) == nil {
		t.Fatal("A's registration no longer served beside an unreadable one")
	}

	for _, p := range []string{badEntry, badRevocation} {
		if err := conn.Delete(p, -1); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "B lists none once they are gone", func() bool { return len(listed()) == 0 })
	if r, v := gauge(sharedstate.UnreadableRegistration), gauge(sharedstate.UnreadableRevocation); r != 0 || v != 0 {
		t.Fatalf("gauges after: registrations %v, revocations %v", r, v)
	}
}
