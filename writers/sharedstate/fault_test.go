package sharedstate_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/consul/api"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

// rawStore writes into the shared state directly, as whoever has write
// access to the store would: with its own session, bound or not.
type rawStore interface {
	// session is the test's own store session, as records name it.
	session() string
	putReplica(id string, data []byte)
	// putEntry writes a registration held by the test's session (bound)
	// or by none (a persistent node, a key without a session).
	putEntry(name string, data []byte, bound bool)
	putRevocation(name string, data []byte)
	// revocations reads the values of name; deleteRevocations removes
	// them all.
	revocations(name string) [][]byte
	deleteRevocations(name string)
	// endSession ends the test's session (its bound records go).
	endSession()
}

type zkRaw struct {
	t      *testing.T
	conn   *zk.Conn
	prefix string
	acl    []zk.ACL
}

// newZKRaw connects to ZooKeeper with the digest the replicas use (a store
// administrator, or a leaked ZooKeeper password: not the state key).
func newZKRaw(t *testing.T, addr, prefix string, key sharedstate.Key) *zkRaw {
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	user, pw := key.ZooKeeperDigest()
	eventually(t, 20*time.Second, "the test's ZooKeeper client authenticated", func() bool {
		return conn.State() == zk.StateHasSession && conn.AddAuth("digest", []byte(user+":"+pw)) == nil
	})
	return &zkRaw{t: t, conn: conn, prefix: "/" + prefix, acl: zk.DigestACL(zk.PermAll, user, pw)}
}

func (z *zkRaw) session() string { return strconv.FormatInt(z.conn.SessionID(), 16) }

func (z *zkRaw) create(p string, data []byte, flags int32) {
	z.t.Helper()
	if _, err := z.conn.Create(p, data, flags, z.acl); err != nil {
		z.t.Fatalf("create %s: %v", p, err)
	}
}

func (z *zkRaw) putReplica(id string, data []byte) {
	z.create(z.prefix+"/replicas/"+id, data, zk.FlagEphemeral)
}

func (z *zkRaw) putEntry(name string, data []byte, bound bool) {
	flags := int32(zk.FlagSequence)
	if bound {
		flags = zk.FlagEphemeralSequential
	}
	z.create(z.prefix+"/registrations/"+name+"~", data, flags)
}

func (z *zkRaw) putRevocation(name string, data []byte) {
	z.create(z.prefix+"/revocations/"+name+"~", data, zk.FlagSequence)
}

func (z *zkRaw) revocationNodes(name string) []string {
	children, _, err := z.conn.Children(z.prefix + "/revocations")
	if err != nil {
		z.t.Fatal(err)
	}
	var out []string
	for _, c := range children {
		if i := strings.LastIndex(c, "~"); i >= 0 && c[:i] == name {
			out = append(out, z.prefix+"/revocations/"+c)
		}
	}
	return out
}

func (z *zkRaw) revocations(name string) [][]byte {
	var out [][]byte
	for _, p := range z.revocationNodes(name) {
		if data, _, err := z.conn.Get(p); err == nil {
			out = append(out, data)
		}
	}
	return out
}

func (z *zkRaw) deleteRevocations(name string) {
	for _, p := range z.revocationNodes(name) {
		if err := z.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			z.t.Fatal(err)
		}
	}
}

func (z *zkRaw) endSession() { z.conn.Close() }

type consulRaw struct {
	t      *testing.T
	kv     *api.KV
	client *api.Client
	prefix string
	sid    string
}

func newConsulRaw(t *testing.T, addr, prefix string) *consulRaw {
	client, err := api.NewClient(&api.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	sid, _, err := client.Session().Create(&api.SessionEntry{TTL: "10s", Behavior: api.SessionBehaviorDelete, LockDelay: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &consulRaw{t: t, kv: client.KV(), client: client, prefix: prefix, sid: sid}
}

func (c *consulRaw) session() string { return c.sid }

func (c *consulRaw) putReplica(id string, data []byte) {
	if ok, _, err := c.kv.Acquire(&api.KVPair{Key: c.prefix + "/replicas/" + id, Value: data, Session: c.sid}, nil); err != nil || !ok {
		c.t.Fatalf("acquire replica %s: %v %v", id, ok, err)
	}
}

func (c *consulRaw) putEntry(name string, data []byte, bound bool) {
	p := &api.KVPair{Key: c.prefix + "/registrations/" + name, Value: data}
	if bound {
		p.Session = c.sid
		if ok, _, err := c.kv.Acquire(p, nil); err != nil || !ok {
			c.t.Fatalf("acquire %s: %v %v", name, ok, err)
		}
		return
	}
	if _, err := c.kv.Put(p, nil); err != nil {
		c.t.Fatal(err)
	}
}

func (c *consulRaw) putRevocation(name string, data []byte) {
	if _, err := c.kv.Put(&api.KVPair{Key: c.prefix + "/revocations/" + name, Value: data}, nil); err != nil {
		c.t.Fatal(err)
	}
}

func (c *consulRaw) revocations(name string) [][]byte {
	p, _, err := c.kv.Get(c.prefix+"/revocations/"+name, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if p == nil {
		return nil
	}
	return [][]byte{p.Value}
}

func (c *consulRaw) deleteRevocations(name string) {
	if _, err := c.kv.Delete(c.prefix+"/revocations/"+name, nil); err != nil {
		c.t.Fatal(err)
	}
}

func (c *consulRaw) endSession() {
	if _, err := c.client.Session().Destroy(c.sid, nil); err != nil {
		c.t.Fatal(err)
	}
}

// neverServes fails the test if any of keys ever enters the store, as
// far as its change notifications show, until the test ends.
func neverServes(t *testing.T, store *store.Store, keys ...store.Key) {
	sub := store.Subscribe()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			snap := store.Snapshot()
			for _, k := range keys {
				if o := snap.Get(k); o != nil {
					t.Errorf("%s is served (origin %s): it must be refused", k, o.Origin.Registry)
				}
			}
			select {
			case <-done:
				return
			case <-sub.C():
				sub.Take()
			}
		}
	}()
	t.Cleanup(func() { close(done); wg.Wait(); sub.Close() })
}

func TestFaultSharedStateForgedRecordsZooKeeper(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	spec := sharedstate.Spec{Type: sharedstate.TypeZooKeeper, Prefix: "vmesh/forged", TTL: 2 * time.Second}
	testForgedRecords(t, spec, z.Addr, func(b *replica) rawStore { return newZKRaw(t, z.Addr, spec.Prefix, testKey(t)) })
}

func TestFaultSharedStateForgedRecordsConsul(t *testing.T) {
	c := testenv.StartConsul(t)
	spec := sharedstate.Spec{Type: sharedstate.TypeConsul, Prefix: "vmesh-forged", TTL: 10 * time.Second}
	testForgedRecords(t, spec, c.HTTPAddr, func(b *replica) rawStore { return newConsulRaw(t, c.HTTPAddr, spec.Prefix) })
}

// testForgedRecords: records written straight into the store are refused
// unless signed with the replicas' key, bound to the live session of the
// replica they name, valid as the same WorkloadEntry in a file, and not
// from the future: a forged (another key, or a signature that does not
// match), an unsigned (today's format), a replayed (signed under another
// name), an unbound (persistent, or naming a replica without a record), an
// invalid (port 99999, a host name as address) and a future-dated
// registration or health report never reach the Store, a health-checked
// config entry stays without health, and each is listed with its reason.
// A record written the same way but signed and bound is served, and goes
// with its session.
func testForgedRecords(t *testing.T, spec sharedstate.Spec, target string, raw func(*replica) rawStore) {
	a := startReplica(t, "A", spec, target)
	b := startReplica(t, "B", spec, target)
	for _, r := range []*replica{a, b} {
		select {
		case <-r.state.Synced():
		case <-time.After(30 * time.Second):
			t.Fatalf("replica %s never read the shared state", r.id)
		}
	}
	// A health-checked config entry on B: no agent reports on it.
	healthKey := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "ledger-vm"}
	we := entry("fin", "ledger-vm", "10.0.0.9", false)
	we.Healthy = nil
	we.Annotations = map[string]string{meshlabels.HealthChecksAnnotation: "true"}
	we.Origin = store.Origin{Source: "dir:/etc/vmesh", File: "ledger.yaml", Line: 1}
	if err := b.store.Replace(store.Source{Name: "dir:/etc/vmesh", Class: store.ClassConfig}, []*store.Object{we}); err != nil {
		t.Fatal(err)
	}

	key := func(name string) store.Key {
		return store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: name}
	}
	bad := []string{"vm-otherkey", "vm-forged", "vm-unsigned", "vm-replayed", "vm-port", "vm-host", "vm-persistent", "vm-noreplica", "vm-future"}
	var badKeys []store.Key
	for _, n := range bad {
		badKeys = append(badKeys, key(n))
	}
	neverServes(t, b.store, badKeys...)
	neverServes(t, a.store, badKeys...)
	watchHealth := b.store.Subscribe()
	defer watchHealth.Close()

	st := raw(b)
	k := testKey(t)
	otherKey, err := sharedstate.NewKey([]byte("another mesh's key, 32 bytes long or more"))
	if err != nil {
		t.Fatal(err)
	}
	sess := st.session()
	now := time.Now().UTC()
	seal := func(key sharedstate.Key, name string, body []byte) []byte {
		return sharedstate.Seal(key, spec.Prefix, name, body)
	}
	rec := func(replica, name, addr string, port int, updated time.Time) []byte {
		body, _ := json.Marshal(map[string]any{
			"replica": replica, "session": sess, "namespace": "fin", "name": name, "apiVersion": "networking.istio.io/v1",
			"labels": map[string]string{"app": "ledger"}, "healthy": true, "registry": "agent evil (group ledger)", "updated": updated,
			"spec": map[string]any{"address": addr, "labels": map[string]string{"app": "ledger"}, "ports": map[string]int{"grpc": port}},
		})
		return body
	}
	// X is a replica the test runs itself: its record is signed and
	// held by the test's session.
	replicaBody, _ := json.Marshal(sharedstate.Replica{ID: "X", Session: sess, StartedAt: now, Heartbeat: now})
	st.putReplica("X", seal(k, "replicas/X", replicaBody))

	want := map[string]string{} // entry name → refusal reason
	put := func(name string, data []byte, bound bool, reason string) {
		st.putEntry(name, data, bound)
		want[name] = reason
	}
	name := func(n string) string { return "X~fin~" + n }
	put(name("vm-otherkey"), seal(otherKey, "registrations/"+name("vm-otherkey"), rec("X", "vm-otherkey", "10.0.0.51", 7070, now)), true, sharedstate.ReasonOtherKey)
	forged := seal(otherKey, "registrations/"+name("vm-forged"), rec("X", "vm-forged", "10.0.0.52", 7070, now))
	forged = []byte(strings.Replace(string(forged), otherKey.ID(), k.ID(), 1))
	put(name("vm-forged"), forged, true, sharedstate.ReasonBadSignature)
	put(name("vm-unsigned"), rec("X", "vm-unsigned", "10.0.0.53", 7070, now), true, sharedstate.ReasonUnsigned)
	// Signed for vm-good's name, stored under another one.
	put(name("vm-replayed"), seal(k, "registrations/"+name("vm-good"), rec("X", "vm-replayed", "10.0.0.54", 7070, now)), true, sharedstate.ReasonBadSignature)
	put(name("vm-port"), seal(k, "registrations/"+name("vm-port"), rec("X", "vm-port", "10.0.0.55", 99999, now)), true, sharedstate.ReasonInvalid)
	put(name("vm-host"), seal(k, "registrations/"+name("vm-host"), rec("X", "vm-host", "evil.example.com", 7070, now)), true, sharedstate.ReasonInvalid)
	put(name("vm-persistent"), seal(k, "registrations/"+name("vm-persistent"), rec("X", "vm-persistent", "10.0.0.56", 7070, now)), false, sharedstate.ReasonUnbound)
	put("Z~fin~vm-noreplica", seal(k, "registrations/Z~fin~vm-noreplica", rec("Z", "vm-noreplica", "10.0.0.57", 7070, now)), true, sharedstate.ReasonUnbound)
	future := time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC)
	put(name("vm-future"), seal(k, "registrations/"+name("vm-future"), rec("X", "vm-future", "10.0.0.58", 7070, future)), true, sharedstate.ReasonFuture)
	healthBody, _ := json.Marshal(map[string]any{"replica": "X", "session": sess, "namespace": "fin", "name": "ledger-vm", "healthy": true, "healthOnly": true, "updated": future})
	put(name("ledger-vm~health"), seal(k, "registrations/"+name("ledger-vm~health"), healthBody), true, sharedstate.ReasonFuture)
	unsignedHealth, _ := json.Marshal(map[string]any{"replica": "A", "namespace": "fin", "name": "ledger-vm", "healthy": true, "healthOnly": true, "updated": now})
	put("A~fin~ledger-vm~health", unsignedHealth, true, sharedstate.ReasonUnsigned)
	// Last, one written the same way, signed and bound: served.
	st.putEntry(name("vm-good"), seal(k, "registrations/"+name("vm-good"), rec("X", "vm-good", "10.0.0.50", 7070, now)), true)

	eventually(t, 10*time.Second, "B serves X's signed, bound registration", func() bool {
		o := b.store.Snapshot().Get(key("vm-good"))
		return o != nil && o.Annotations["vmesh.io/replica"] == "X"
	})
	var got []sharedstate.UnreadableRecord
	eventually(t, 10*time.Second, "B lists every refused record with its reason", func() bool {
		got = b.state.Status(context.Background()).Unreadable
		n := 0
		for _, u := range got {
			if u.Kind != sharedstate.UnreadableRegistration {
				continue
			}
			for nm, reason := range want {
				if (u.Key == nm || strings.HasPrefix(u.Key, nm+"~0")) && u.Reason == reason {
					n++
				}
			}
		}
		return n == len(want)
	})
	for _, u := range got {
		if strings.Contains(u.Error, "evil.example.com") || strings.Contains(u.Error, "agent evil") {
			t.Fatalf("a refusal echoes the record's value: %+v", u)
		}
	}
	t.Logf("refused: %+v", got)
	if n := b.state.Unreadable(sharedstate.UnreadableRegistration); n != len(want) {
		t.Fatalf("B counts %d refused registrations, want %d", n, len(want))
	}
	if n := b.state.RefusedTotal(sharedstate.UnreadableRegistration); n < uint64(len(want)) {
		t.Fatalf("B's refusals total %d, want at least %d", n, len(want))
	}
	// The health-checked entry never got a health from the forged reports.
	for {
		if h := b.store.Snapshot().Get(healthKey).Healthy; h != nil {
			t.Fatalf("a forged health report set %s's health to %v", healthKey, *h)
		}
		select {
		case <-watchHealth.C():
			watchHealth.Take()
			continue
		default:
		}
		break
	}

	// X's session ends: its registration goes; the refused ones never came.
	st.endSession()
	eventually(t, 3*spec.TTL+10*time.Second, "X's registration gone with its session", func() bool {
		return b.store.Snapshot().Get(key("vm-good")) == nil
	})
}

func TestFaultSharedStateRevocationsZooKeeper(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	spec := sharedstate.Spec{Type: sharedstate.TypeZooKeeper, Prefix: "vmesh/revocations", TTL: 2 * time.Second}
	testRevocationFaults(t, spec, z.Addr, newZKRaw(t, z.Addr, spec.Prefix, testKey(t)))
}

func TestFaultSharedStateRevocationsConsul(t *testing.T) {
	c := testenv.StartConsul(t)
	spec := sharedstate.Spec{Type: sharedstate.TypeConsul, Prefix: "vmesh-revocations", TTL: 10 * time.Second}
	testRevocationFaults(t, spec, c.HTTPAddr, newConsulRaw(t, c.HTTPAddr, spec.Prefix))
}

// testRevocationFaults: a future-dated identity revocation (signed: a
// replica with a clock gone wrong, or a replayed key) and an unsigned one
// are refused and revoke nothing; a revocation deleted from the store is
// written again by the replicas holding it, and a replica started later,
// with an empty data dir, learns it from the store.
func testRevocationFaults(t *testing.T, spec sharedstate.Spec, target string, st rawStore) {
	a := startReplica(t, "A", spec, target)
	b := startReplica(t, "B", spec, target)
	for _, r := range []*replica{a, b} {
		<-r.state.Synced()
	}
	k := testKey(t)
	now := time.Now().UTC()
	lockedOut := "spiffe://cluster.local/ns/fin/sa/ledger"
	futureRV, _ := json.Marshal(ca.Revocation{Identity: lockedOut, RevokedAt: time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC), Reason: "lock everyone out"})
	futureName := "identity~spiffe:%2F%2Fcluster.local%2Fns%2Ffin%2Fsa%2Fledger"
	st.putRevocation(futureName, sharedstate.Seal(k, spec.Prefix, "revocations/"+futureName, futureRV))
	unsignedRV, _ := json.Marshal(ca.Revocation{Token: "forged-token-id", RevokedAt: now})
	st.putRevocation("token~forged-token-id", unsignedRV)

	// A revokes a token on its own CA: it is shared.
	if err := a.ca.RevokeToken("tok-lost", "lost laptop"); err != nil {
		t.Fatal(err)
	}
	holds := func(r *replica, token string) bool {
		for _, rv := range r.ca.Revoked() {
			if rv.Token == token {
				return true
			}
		}
		return false
	}
	eventually(t, 10*time.Second, "B applies A's revocation", func() bool { return holds(b, "tok-lost") })
	eventually(t, 10*time.Second, "B refuses the future-dated and the unsigned revocation", func() bool {
		reasons := map[string]bool{}
		for _, u := range b.state.Status(context.Background()).Unreadable {
			if u.Kind == sharedstate.UnreadableRevocation {
				reasons[u.Reason] = true
			}
		}
		return reasons[sharedstate.ReasonFuture] && reasons[sharedstate.ReasonUnsigned]
	})
	for _, r := range []*replica{a, b} {
		for _, rv := range r.ca.Revoked() {
			if rv.Identity == lockedOut || rv.Token == "forged-token-id" {
				t.Fatalf("replica %s applied a refused revocation: %+v", r.id, rv)
			}
		}
		// The identity is not locked out: a token for it verifies.
		tok, _, err := r.ca.CreateToken(ca.TokenRequest{Namespace: "fin", ServiceAccount: "ledger"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.ca.VerifyToken(tok); err != nil {
			t.Fatalf("replica %s: the identity is locked out by a future-dated revocation: %v", r.id, err)
		}
	}

	// Whoever can write to the store deletes the revocation: the replicas
	// holding it write it again.
	name := "token~tok-lost"
	if len(st.revocations(name)) == 0 {
		t.Fatal("the shared revocation is not in the store")
	}
	st.deleteRevocations(name)
	took := eventually(t, 10*time.Second, "the deleted revocation is back in the store", func() bool {
		for _, v := range st.revocations(name) {
			if strings.Contains(string(v), `"tok-lost"`) && strings.Contains(string(v), `"sig"`) {
				return true
			}
		}
		return false
	})
	t.Logf("deleted revocation restored after %s", took)

	// Both stop; a replica started later with an empty data dir learns it.
	a.stop()
	b.stop()
	c := startReplica(t, "C", spec, target)
	eventually(t, 10*time.Second, "C, started later, holds the revocation", func() bool { return holds(c, "tok-lost") })
	for _, rv := range c.ca.Revoked() {
		if rv.Identity == lockedOut || rv.Token == "forged-token-id" {
			t.Fatalf("C applied a refused revocation: %+v", rv)
		}
	}
}
