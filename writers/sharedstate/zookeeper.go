package sharedstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/vmesh/vmesh/internal/retry"
)

// zkBackend keeps the shared state in ZooKeeper:
//
//	/<root>/replicas/<id>                              this replica's record (ephemeral)
//	/<root>/registrations/<id>~<ns>~<name>~<sequence>  its registrations     (ephemeral, sequential)
//	/<root>/revocations/<kind>~<value>~<sequence>       revocations           (persistent, sequential)
//
// Registration nodes are never changed: an update creates the next
// sequential node and deletes the previous one, so watchers need one
// children watch and read each node once; the highest sequence of a name
// is current. The session's expiry (the replica died) deletes its nodes.
// Every node vmesh creates carries a digest ACL derived from the state key
// (Key.ZooKeeperDigest): no world access.
type zkBackend struct {
	spec Spec
	id   string
	log  *slog.Logger
	conn *zk.Conn
	// newSession receives when the connection gets a session other than
	// the last one.
	newSession chan struct{}

	// acl is the digest ACL of every node vmesh creates: only clients
	// authenticated with the digest derived from the state key read or
	// write them; auth is that digest ("user:password"), and authed is
	// closed once the connection is authenticated.
	acl    []zk.ACL
	auth   []byte
	authed chan struct{}

	mu          sync.Mutex
	lastSession int64
	nodes       map[string]string // entry name → its current node path
	cache       map[string]value  // node path → value (registration nodes never change)
}

func newZooKeeper(s Spec, id string, key Key, log *slog.Logger) (*zkBackend, error) {
	servers := strings.Split(s.Address, ",")
	for i := range servers {
		servers[i] = strings.TrimSpace(servers[i])
	}
	user, password := key.ZooKeeperDigest()
	z := &zkBackend{spec: s, id: id, log: log, newSession: make(chan struct{}, 1), nodes: map[string]string{}, cache: map[string]value{},
		acl: zk.DigestACL(zk.PermAll, user, password), auth: []byte(user + ":" + password), authed: make(chan struct{})}
	conn, _, err := zk.Connect(servers, s.TTL, zk.WithLogInfo(false), zk.WithLogger(zkLog{log}),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type != zk.EventSession || ev.State != zk.StateHasSession {
				return
			}
			z.mu.Lock()
			defer z.mu.Unlock()
			// The callback runs before Connect returns on a fast server.
			if z.conn == nil {
				return
			}
			if sid := z.conn.SessionID(); sid != z.lastSession {
				z.lastSession = sid
				clear(z.nodes)
				select {
				case z.newSession <- struct{}{}:
				default:
				}
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("state: zookeeper %v: %w", servers, err)
	}
	z.mu.Lock()
	z.conn = conn
	if sid := conn.SessionID(); sid != 0 && sid != z.lastSession {
		z.lastSession = sid
		z.newSession <- struct{}{}
	}
	z.mu.Unlock()
	return z, nil
}

type zkLog struct{ log *slog.Logger }

func (l zkLog) Printf(format string, args ...any) {
	l.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

func (z *zkBackend) node(parts ...string) string {
	return "/" + path.Join(append([]string{z.spec.Prefix}, parts...)...)
}

// ensure creates the persistent parents.
func (z *zkBackend) ensure() error {
	p := ""
	for _, part := range strings.Split(z.spec.Prefix, "/") {
		p += "/" + part
		// Parents above the root node may hold other meshes' roots:
		// anyone may read them and create in them.
		acl := zk.WorldACL(zk.PermRead | zk.PermCreate)
		if p == z.node() {
			acl = z.acl
		}
		if _, err := z.conn.Create(p, nil, zk.FlagPersistent, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zookeeper create %s: %w", p, err)
		}
	}
	for _, d := range []string{"replicas", "registrations", "revocations"} {
		if _, err := z.conn.Create(z.node(d), nil, zk.FlagPersistent, z.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zookeeper create %s: %w", z.node(d), err)
		}
	}
	return nil
}

// restrict puts the digest ACL on the state's root node and its three
// directories when they have another (created open by an earlier vmesh,
// or by hand) and this client may: nobody without the state key writes
// under them then.
func (z *zkBackend) restrict() error {
	nodes := []string{z.node()}
	for _, d := range []string{"replicas", "registrations", "revocations"} {
		nodes = append(nodes, z.node(d))
	}
	for _, n := range nodes {
		acl, _, err := z.conn.GetACL(n)
		if err != nil {
			return fmt.Errorf("zookeeper getAcl %s: %w", n, err)
		}
		if slices.Equal(acl, z.acl) {
			continue
		}
		if _, err := z.conn.SetACL(n, z.acl, -1); err != nil {
			return fmt.Errorf("zookeeper setAcl %s (it has another ACL: give it vmesh's digest ACL by hand): %w", n, err)
		}
		z.log.Warn("zookeeper: replaced the ACL of a shared-state node by vmesh's digest ACL", "node", n)
	}
	return nil
}

// authenticate adds the digest to the connection once (the client re-sends
// it on every reconnect).
func (z *zkBackend) authenticate(ctx context.Context) {
	select {
	case <-z.authed:
		return
	default:
	}
	b := retry.New(200*time.Millisecond, 5*time.Second)
	for ctx.Err() == nil {
		if err := z.conn.AddAuth("digest", z.auth); err != nil {
			z.log.Warn("zookeeper: authenticating failed; retrying", "error", err)
			b.Wait(ctx)
			continue
		}
		close(z.authed)
		return
	}
}

// sessionHex renders a ZooKeeper session ID as records name it.
func sessionHex(id int64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatInt(id, 16)
}

func (z *zkBackend) session() string { return sessionHex(z.conn.SessionID()) }

// run forwards each new session (the ZooKeeper client reconnects by
// itself, with a new session once the old one expired).
func (z *zkBackend) run(ctx context.Context, sessions chan<- struct{}) error {
	b := retry.New(200*time.Millisecond, 5*time.Second)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-z.newSession:
		}
		z.authenticate(ctx)
		for ctx.Err() == nil {
			err := z.ensure()
			if err == nil {
				err = z.restrict()
			}
			if err != nil {
				z.log.Warn("zookeeper: creating the state's nodes failed; retrying", "error", err)
				b.Wait(ctx)
				continue
			}
			b.Reset()
			z.log.Info("zookeeper session", "session", fmt.Sprintf("%#x", z.conn.SessionID()))
			select {
			case sessions <- struct{}{}:
			default:
			}
			break
		}
	}
}

// putReplica writes this replica's record as an ephemeral node of its
// session: a node of the same name held by another session (this replica's
// previous run, before its session expired) is replaced, since the other
// replicas accept only registrations of the session holding the record.
func (z *zkBackend) putReplica(_ context.Context, data []byte) error {
	p := z.node("replicas", z.id)
	sid := z.conn.SessionID()
	_, stat, err := z.conn.Exists(p)
	if err != nil {
		return fmt.Errorf("zookeeper exists %s: %w", p, err)
	}
	if stat != nil && stat.EphemeralOwner == sid {
		_, err = z.conn.Set(p, data, -1)
	} else {
		if stat != nil {
			if err := z.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return fmt.Errorf("zookeeper delete %s (held by session %s): %w", p, sessionHex(stat.EphemeralOwner), err)
			}
		}
		_, err = z.conn.Create(p, data, zk.FlagEphemeral, z.acl)
	}
	if err != nil {
		return fmt.Errorf("zookeeper set %s: %w", p, err)
	}
	return nil
}

func (z *zkBackend) deleteReplica(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- z.conn.Delete(z.node("replicas", z.id), -1) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("zookeeper: %w", ctx.Err())
	}
}

func (z *zkBackend) putEntry(_ context.Context, name string, data []byte) error {
	p, err := z.conn.Create(z.node("registrations", name+"~"), data, zk.FlagEphemeralSequential, z.acl)
	if err != nil {
		return fmt.Errorf("zookeeper create %s: %w", name, err)
	}
	z.mu.Lock()
	old := z.nodes[name]
	z.nodes[name] = p
	z.mu.Unlock()
	if old != "" {
		if err := z.conn.Delete(old, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("zookeeper delete %s: %w", old, err)
		}
	}
	return nil
}

func (z *zkBackend) deleteEntry(_ context.Context, name string) error {
	z.mu.Lock()
	old := z.nodes[name]
	delete(z.nodes, name)
	z.mu.Unlock()
	if old == "" {
		return nil
	}
	if err := z.conn.Delete(old, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("zookeeper delete %s: %w", old, err)
	}
	return nil
}

// watchChildren calls fn with every child of dir (its value: data and
// ephemeral owner) after each change; with cache, children are read once
// (registration and revocation nodes never change), else every time (the
// replicas' records). Errors are retried with backoff and keep the last
// set.
func (z *zkBackend) watchChildren(ctx context.Context, dir string, cache bool, fn func(map[string]value)) error {
	select {
	case <-ctx.Done():
		return nil
	case <-z.authed:
	}
	b := retry.New(100*time.Millisecond, 5*time.Second)
	for ctx.Err() == nil {
		children, _, ev, err := z.conn.ChildrenW(dir)
		if errors.Is(err, zk.ErrNoNode) {
			err = z.ensure()
			if err == nil {
				continue
			}
		}
		if err != nil {
			z.log.Debug("zookeeper: reading the shared state failed; keeping the last known state", "node", dir, "error", err)
			b.Wait(ctx)
			continue
		}
		b.Reset()
		out := make(map[string]value, len(children))
		failed := false
		for _, c := range children {
			p := dir + "/" + c
			z.mu.Lock()
			v, ok := z.cache[p]
			z.mu.Unlock()
			if !ok || !cache {
				data, stat, err := z.conn.Get(p)
				if errors.Is(err, zk.ErrNoNode) {
					continue // deleted since the listing
				}
				if err != nil {
					failed = true
					break
				}
				v = value{key: c, name: c, data: data, session: sessionHex(stat.EphemeralOwner)}
				if cache {
					z.mu.Lock()
					z.cache[p] = v
					z.mu.Unlock()
				}
			}
			out[c] = v
		}
		if failed {
			b.Wait(ctx)
			continue
		}
		if cache {
			z.mu.Lock()
			for p := range z.cache {
				if _, ok := out[strings.TrimPrefix(p, dir+"/")]; !ok && strings.HasPrefix(p, dir+"/") {
					delete(z.cache, p)
				}
			}
			z.mu.Unlock()
		}
		fn(out)
		select {
		case <-ctx.Done():
		case <-ev:
		}
	}
	return nil
}

// unsequenced names each child by its name without the sequence
// ("<name>~<sequence>"); a child without one keeps its whole name.
func unsequenced(children map[string]value) []value {
	out := make([]value, 0, len(children))
	for _, c := range slices.Sorted(maps.Keys(children)) {
		v := children[c]
		if i := strings.LastIndex(c, "~"); i >= 0 {
			v.name = c[:i]
		}
		out = append(out, v)
	}
	return out
}

func (z *zkBackend) watchEntries(ctx context.Context, fn func([]value)) error {
	return z.watchChildren(ctx, z.node("registrations"), true, func(children map[string]value) { fn(unsequenced(children)) })
}

func (z *zkBackend) watchReplicas(ctx context.Context, fn func([]value)) error {
	return z.watchChildren(ctx, z.node("replicas"), false, func(children map[string]value) {
		fn(slices.Collect(maps.Values(children)))
	})
}

func (z *zkBackend) putRevocation(_ context.Context, name string, data []byte) error {
	if err := z.ensure(); err != nil {
		return err
	}
	if _, err := z.conn.Create(z.node("revocations", name+"~"), data, zk.FlagSequence, z.acl); err != nil {
		return fmt.Errorf("zookeeper create revocation: %w", err)
	}
	return nil
}

func (z *zkBackend) watchRevocations(ctx context.Context, fn func([]value)) error {
	return z.watchChildren(ctx, z.node("revocations"), true, func(children map[string]value) { fn(unsequenced(children)) })
}

// replicas reads the records; the ZooKeeper client takes no context, so a
// disconnected one is given up on when ctx ends.
func (z *zkBackend) replicas(ctx context.Context) ([]value, error) {
	type result struct {
		out []value
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := z.readReplicas()
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("zookeeper: %w", ctx.Err())
	}
}

func (z *zkBackend) readReplicas() ([]value, error) {
	dir := z.node("replicas")
	children, _, err := z.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []value
	for _, c := range children {
		data, stat, err := z.conn.Get(dir + "/" + c)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, value{key: c, name: c, data: data, session: sessionHex(stat.EphemeralOwner)})
	}
	return out, nil
}

func (z *zkBackend) close() { z.conn.Close() }
