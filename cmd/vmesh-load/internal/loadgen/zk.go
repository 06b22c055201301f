package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/vmesh/vmesh/registries"
	"github.com/vmesh/vmesh/registries/zookeeper"
)

// zkBatch is how many operations one ZooKeeper multi carries (well under
// ZooKeeper's 1 MiB request limit with ~250-byte provider paths).
const zkBatch = 250

// zkParallel is how many multis are in flight at once while registering.
const zkParallel = 4

// zkRegistry is the harness's side of SourceZooKeeper: it registers every
// endpoint as a Dubbo provider under a root of its own, moves providers
// for endpoint changes, and deletes its whole tree at the end.
type zkRegistry struct {
	conn *zk.Conn
	addr string
	// base is the run's own root node, e.g. /vmesh-load-1234-1700000000;
	// namespace ns-k's Dubbo registry root is base/ns-k.
	base string
	sz   Size
}

// sessionWait bounds how long dialZooKeeper waits for a session. A
// ZooKeeper creates a session only once it is written to its log, which on
// a busy machine (a test suite on two cores) took more than 15 s; the wait
// is only there to name an address where no ZooKeeper answers.
const sessionWait = time.Minute

// dialZooKeeper connects to the ZooKeeper at addr and picks a root node
// name no other run uses. It waits for a session until ctx is done or
// sessionWait has passed.
func dialZooKeeper(ctx context.Context, addr string, sz Size, logger *slog.Logger) (*zkRegistry, error) {
	conn, ev, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkLog{logger}))
	if err != nil {
		return nil, fmt.Errorf("loadgen: zookeeper %s: %w", addr, err)
	}
	wait, cancel := context.WithTimeout(ctx, sessionWait)
	defer cancel()
	for connected := false; !connected; {
		select {
		case e := <-ev:
			connected = e.State == zk.StateHasSession
		case <-wait.Done():
			conn.Close()
			return nil, fmt.Errorf("loadgen: zookeeper %s: no session after %s (is ZooKeeper running there?): %w", addr, sessionWait, context.Cause(wait))
		}
	}
	go func() { // the event channel must be drained
		for range ev {
		}
	}()
	base := fmt.Sprintf("/vmesh-load-%d-%d", os.Getpid(), time.Now().UnixNano())
	return &zkRegistry{conn: conn, addr: addr, base: base, sz: sz}, nil
}

// zkLog sends go-zookeeper's log lines to slog at debug level.
type zkLog struct{ l *slog.Logger }

func (z zkLog) Printf(format string, args ...any) { z.l.Debug(fmt.Sprintf(format, args...)) }

// root returns the Dubbo registry root of namespace n, without the leading
// slash (as zookeeper.Config.Root takes it).
func (r *zkRegistry) root(n int) string { return fmt.Sprintf("%s/ns-%d", r.base[1:], n) }

// Specs returns the vmesh child's registry entries: one ZooKeeper registry
// per namespace, each holding the services of that namespace, so the
// generated objects land in the namespaces the file config uses.
func (r *zkRegistry) Specs() []registries.Spec {
	specs := make([]registries.Spec, r.sz.Namespaces)
	for n := range specs {
		specs[n] = registries.Spec{
			Name: fmt.Sprintf("zk-ns-%d", n), Type: registries.TypeZooKeeper, Namespace: fmt.Sprintf("ns-%d", n),
			ZooKeeper: &zookeeper.Config{
				Servers: []string{r.addr}, Root: r.root(n), DisableApplications: true,
				InitialSyncTimeout: 5 * time.Minute,
			},
		}
	}
	return specs
}

// providerPath returns the znode of endpoint j of service i at generation gen.
func (r *zkRegistry) providerPath(i, j, gen int) string {
	return r.providersDir(i) + "/" + url.QueryEscape(ProviderURL(r.sz, i, j, gen))
}

func (r *zkRegistry) providersDir(i int) string {
	return "/" + r.root(i%r.sz.Namespaces) + "/" + Interface(i) + "/providers"
}

// Register creates every service's providers (generation 0), in multis of
// zkBatch operations, zkParallel at a time.
func (r *zkRegistry) Register(ctx context.Context) error {
	acl := zk.WorldACL(zk.PermAll)
	parents := []string{r.base}
	for n := range r.sz.Namespaces {
		parents = append(parents, "/"+r.root(n))
	}
	for _, p := range parents {
		if _, err := r.conn.Create(p, nil, 0, acl); err != nil {
			return fmt.Errorf("loadgen: zookeeper create %s: %w", p, err)
		}
	}
	batches := make(chan []any)
	errc := make(chan error, zkParallel)
	var wg sync.WaitGroup
	for range zkParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ops := range batches {
				if _, err := r.conn.Multi(ops...); err != nil {
					errc <- fmt.Errorf("loadgen: zookeeper multi of %d creates: %w", len(ops), err)
					return
				}
			}
		}()
	}
	send := func(ops []any) error {
		select {
		case batches <- ops:
			return nil
		case err := <-errc:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var err error
	var ops []any
	// A service's nodes stay in one multi, parents before children.
	for i := 0; i < r.sz.Services && err == nil; i++ {
		dir := r.providersDir(i)
		ops = append(ops, &zk.CreateRequest{Path: path.Dir(dir), Acl: acl}, &zk.CreateRequest{Path: dir, Acl: acl})
		for j := range r.sz.Endpoints {
			ops = append(ops, &zk.CreateRequest{Path: r.providerPath(i, j, 0), Acl: acl})
		}
		if len(ops) >= zkBatch {
			err, ops = send(ops), nil
		}
	}
	if err == nil && len(ops) > 0 {
		err = send(ops)
	}
	close(batches)
	wg.Wait()
	close(errc)
	if err != nil {
		return err
	}
	return <-errc // nil once closed and empty
}

// MoveEndpoint moves endpoint 0 of service i from generation gen-1's
// address to gen's: one multi deleting the old provider and creating the
// new, so the adapter sees one change, as a provider's re-registration
// under a new address would look once both events arrived.
func (r *zkRegistry) MoveEndpoint(i, gen int) error {
	_, err := r.conn.Multi(
		&zk.DeleteRequest{Path: r.providerPath(i, 0, gen-1), Version: -1},
		&zk.CreateRequest{Path: r.providerPath(i, 0, gen), Acl: zk.WorldACL(zk.PermAll)})
	if err != nil {
		return fmt.Errorf("loadgen: zookeeper: moving endpoint 0 of %s to generation %d: %w", Interface(i), gen, err)
	}
	return nil
}

// Close deletes the run's whole tree and closes the connection.
func (r *zkRegistry) Close() error {
	defer r.conn.Close()
	return deleteTree(r.conn, r.base)
}

// deleteTree deletes p and everything under it, deepest nodes first, in
// multis of zkBatch deletes. Children of a "providers" node are taken to be
// leaves (Dubbo provider nodes are), which saves a read per provider.
func deleteTree(conn *zk.Conn, p string) error {
	var order []string // parents before children
	queue := []string{p}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if path.Base(path.Dir(n)) == "providers" {
			order = append(order, n)
			continue
		}
		children, _, err := conn.Children(n)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return fmt.Errorf("loadgen: zookeeper list %s: %w", n, err)
		}
		order = append(order, n)
		for _, c := range children {
			queue = append(queue, n+"/"+c)
		}
	}
	var ops []any
	for k := len(order) - 1; k >= 0; k-- {
		ops = append(ops, &zk.DeleteRequest{Path: order[k], Version: -1})
		if len(ops) == zkBatch || k == 0 {
			if _, err := conn.Multi(ops...); err != nil {
				return fmt.Errorf("loadgen: zookeeper deleting %s: %w", p, err)
			}
			ops = ops[:0]
		}
	}
	return nil
}
