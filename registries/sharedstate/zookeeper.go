package sharedstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
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
type zkBackend struct {
	spec Spec
	id   string
	log  *slog.Logger
	conn *zk.Conn
	// newSession receives when the connection gets a session other than
	// the last one.
	newSession chan struct{}

	mu          sync.Mutex
	lastSession int64
	nodes       map[string]string // entry name → its current node path
	cache       map[string][]byte // node path → data (nodes never change)
}

var openACL = zk.WorldACL(zk.PermAll)

func newZooKeeper(s Spec, id string, log *slog.Logger) (*zkBackend, error) {
	servers := strings.Split(s.Address, ",")
	for i := range servers {
		servers[i] = strings.TrimSpace(servers[i])
	}
	z := &zkBackend{spec: s, id: id, log: log, newSession: make(chan struct{}, 1), nodes: map[string]string{}, cache: map[string][]byte{}}
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
		if _, err := z.conn.Create(p, nil, zk.FlagPersistent, openACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zookeeper create %s: %w", p, err)
		}
	}
	for _, d := range []string{"replicas", "registrations", "revocations"} {
		if _, err := z.conn.Create(z.node(d), nil, zk.FlagPersistent, openACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zookeeper create %s: %w", z.node(d), err)
		}
	}
	return nil
}

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
		for ctx.Err() == nil {
			if err := z.ensure(); err != nil {
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

func (z *zkBackend) putReplica(_ context.Context, data []byte) error {
	p := z.node("replicas", z.id)
	_, err := z.conn.Set(p, data, -1)
	if errors.Is(err, zk.ErrNoNode) {
		_, err = z.conn.Create(p, data, zk.FlagEphemeral, openACL)
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
	p, err := z.conn.Create(z.node("registrations", name+"~"), data, zk.FlagEphemeralSequential, openACL)
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

// watchChildren calls fn with the data of every child of dir after each
// change (children never change, so each is read once); errors are
// retried with backoff and keep the last set.
func (z *zkBackend) watchChildren(ctx context.Context, dir string, fn func(map[string][]byte)) error {
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
		out := make(map[string][]byte, len(children))
		failed := false
		for _, c := range children {
			p := dir + "/" + c
			z.mu.Lock()
			data, ok := z.cache[p]
			z.mu.Unlock()
			if !ok {
				data, _, err = z.conn.Get(p)
				if errors.Is(err, zk.ErrNoNode) {
					continue // deleted since the listing
				}
				if err != nil {
					failed = true
					break
				}
				z.mu.Lock()
				z.cache[p] = data
				z.mu.Unlock()
			}
			out[c] = data
		}
		if failed {
			b.Wait(ctx)
			continue
		}
		z.mu.Lock()
		for p := range z.cache {
			if _, ok := out[strings.TrimPrefix(p, dir+"/")]; !ok && strings.HasPrefix(p, dir+"/") {
				delete(z.cache, p)
			}
		}
		z.mu.Unlock()
		fn(out)
		select {
		case <-ctx.Done():
		case <-ev:
		}
	}
	return nil
}

// latest keeps the highest sequence of each name ("<name>~<sequence>").
func latest(children map[string][]byte) map[string][]byte {
	best := map[string]string{}
	for c := range children {
		i := strings.LastIndex(c, "~")
		if i < 0 {
			continue
		}
		name := c[:i]
		if cur, ok := best[name]; !ok || c > cur { // sequences are zero-padded
			best[name] = c
		}
	}
	out := make(map[string][]byte, len(best))
	for name, c := range best {
		out[name] = children[c]
	}
	return out
}

func (z *zkBackend) watchEntries(ctx context.Context, fn func(map[string][]byte)) error {
	return z.watchChildren(ctx, z.node("registrations"), func(children map[string][]byte) { fn(latest(children)) })
}

func (z *zkBackend) putRevocation(_ context.Context, name string, data []byte) error {
	if err := z.ensure(); err != nil {
		return err
	}
	if _, err := z.conn.Create(z.node("revocations", name+"~"), data, zk.FlagSequence, openACL); err != nil {
		return fmt.Errorf("zookeeper create revocation: %w", err)
	}
	return nil
}

func (z *zkBackend) watchRevocations(ctx context.Context, fn func([][]byte)) error {
	return z.watchChildren(ctx, z.node("revocations"), func(children map[string][]byte) {
		fn(slicesOf(children))
	})
}

func slicesOf(m map[string][]byte) [][]byte {
	out := make([][]byte, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

// replicas reads the records; the ZooKeeper client takes no context, so a
// disconnected one is given up on when ctx ends.
func (z *zkBackend) replicas(ctx context.Context) ([][]byte, error) {
	type result struct {
		out [][]byte
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

func (z *zkBackend) readReplicas() ([][]byte, error) {
	dir := z.node("replicas")
	children, _, err := z.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, c := range children {
		data, _, err := z.conn.Get(dir + "/" + c)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	return out, nil
}

func (z *zkBackend) close() { z.conn.Close() }
