package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/consul/api"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

// revocationStore reads and deletes a revocation straight in the store, as
// whoever may write there would (not with the state key).
type revocationStore struct {
	list   func() []string // the values of the revocation
	delete func()
}

func zkRevocationStore(t *testing.T, addr, cacerts, name string) revocationStore {
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	// The store's own access: the digest the replicas use on their nodes.
	key, err := sharedstate.KeyFromCACerts(cacerts)
	if err != nil {
		t.Fatal(err)
	}
	user, pw := key.ZooKeeperDigest()
	waitUntil(t, 20*time.Second, "the test's ZooKeeper client authenticated", func() bool {
		return conn.State() == zk.StateHasSession && conn.AddAuth("digest", []byte(user+":"+pw)) == nil
	})
	nodes := func() []string {
		children, _, err := conn.Children("/vmesh/revocations")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range children {
			if strings.HasPrefix(c, name+"~") {
				out = append(out, "/vmesh/revocations/"+c)
			}
		}
		return out
	}
	return revocationStore{
		list: func() []string {
			var out []string
			for _, p := range nodes() {
				if data, _, err := conn.Get(p); err == nil {
					out = append(out, string(data))
				}
			}
			return out
		},
		delete: func() {
			for _, p := range nodes() {
				if err := conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
					t.Fatal(err)
				}
			}
		},
	}
}

func consulRevocationStore(t *testing.T, addr, name string) revocationStore {
	client, err := api.NewClient(&api.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	k := "vmesh/revocations/" + name
	return revocationStore{
		list: func() []string {
			p, _, err := client.KV().Get(k, nil)
			if err != nil || p == nil {
				return nil
			}
			return []string{string(p.Value)}
		},
		delete: func() {
			if _, err := client.KV().Delete(k, nil); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func TestFaultSharedStateRevocationRestoredZooKeeper(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	testRevocationRestored(t, sharedstate.Spec{Type: sharedstate.TypeZooKeeper, TTL: 3 * time.Second}, z.Addr,
		func(cacerts, name string) revocationStore { return zkRevocationStore(t, z.Addr, cacerts, name) })
}

func TestFaultSharedStateRevocationRestoredConsul(t *testing.T) {
	c := testenv.StartConsul(t)
	testRevocationRestored(t, sharedstate.Spec{Type: sharedstate.TypeConsul, TTL: 10 * time.Second}, c.HTTPAddr,
		func(_, name string) revocationStore { return consulRevocationStore(t, c.HTTPAddr, name) })
}

// testRevocationRestored: a bootstrap token revoked with `vmesh ca revoke
// --state` (signed with the key derived from the shared --cacerts-dir) is
// refused by both replicas; deleted from the store by whoever may write
// there, it is written back by the replicas that hold it; with both gone,
// a replica started later with an empty data dir learns it from the store
// and refuses the token.
func testRevocationRestored(t *testing.T, spec sharedstate.Spec, target string, store func(cacerts, name string) revocationStore) {
	configDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(configDir, "ledger.yaml"), []byte(fmt.Sprintf(replicasMesh, "7070")), 0o644); err != nil {
		t.Fatal(err)
	}
	cacerts := writePluginCA(t)
	a := startTestReplica(t, "A", configDir, cacerts, spec, target)
	b := startTestReplica(t, "B", configDir, cacerts, spec, target)
	tok, claims, err := a.cp.CA().CreateToken(ca.TokenRequest{Namespace: "fin", ServiceAccount: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*testReplica{a, b} {
		if _, err := r.cp.CA().VerifyToken(tok); err != nil {
			t.Fatalf("replica %s refuses the shared CA's token before revocation: %v", r.id, err)
		}
	}
	direct := spec
	direct.Address = target
	if out, code := runVMesh(t, "ca", "revoke", "--state", direct.String(), "--cacerts-dir", cacerts, "--token", claims.ID, "--reason", "lost VM"); code != 0 {
		t.Fatalf("vmesh ca revoke --state: exit %d: %s", code, out)
	}
	refuses := func(r *testReplica) func() bool {
		return func() bool {
			_, err := r.cp.CA().VerifyToken(tok)
			return err != nil && strings.Contains(err.Error(), "revoked")
		}
	}
	for _, r := range []*testReplica{a, b} {
		waitUntil(t, 10*time.Second, "replica "+r.id+" refuses the revoked token", refuses(r))
	}

	// The revocation is deleted from the store: the replicas write it back.
	st := store(cacerts, "token~"+claims.ID)
	if len(st.list()) == 0 {
		t.Fatal("the revocation is not in the store")
	}
	st.delete()
	deleted := time.Now()
	waitUntil(t, 10*time.Second, "the deleted revocation is back in the store", func() bool {
		for _, v := range st.list() {
			if strings.Contains(v, claims.ID) && strings.Contains(v, `"sig"`) {
				return true
			}
		}
		return false
	})
	t.Logf("deleted revocation written back after %s", time.Since(deleted))

	// Both replicas go; one started later, with an empty data dir, learns
	// the revocation from the store and refuses the token.
	a.kill()
	b.kill()
	c := startTestReplica(t, "C", configDir, cacerts, spec, target)
	if c.dataDir == a.dataDir || c.dataDir == b.dataDir {
		t.Fatal("C shares a data dir")
	}
	waitUntil(t, 10*time.Second, "C, started later, refuses the revoked token", refuses(c))
	var listed bool
	for _, rv := range c.cp.CA().Revoked() {
		listed = listed || rv.Token == claims.ID
	}
	if !listed {
		t.Fatal("C's revocation list lacks the token")
	}
}
