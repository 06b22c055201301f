// Package zookeeper is the ZooKeeper/Dubbo registry adapter. It watches
// Dubbo's interface-level registry (/<root>/<interface>/providers/<URL>) and
// Dubbo 3 application-level discovery (/services/<application>/<instance>,
// the /<root>/mapping interface→application mapping and /<root>/metadata)
// and keeps one complete set of generated ServiceEntries and
// WorkloadEntries in the Store. See README.md for the naming rules.
package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strconv"
	"sync"

	"github.com/go-zookeeper/zk"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
)

// Adapter watches one ZooKeeper ensemble.
type Adapter struct {
	cfg  Config
	sink *adapter.Sink
	log  *slog.Logger

	mu         sync.Mutex
	pub        *adapter.Publisher
	ports      adapter.PortNumbers // keeps each ServiceEntry's port numbers
	ifaces     map[string]*ifaceState
	apps       map[string]map[string]*Instance // application → instance id → instance
	mapping    map[string][]string             // interface → applications
	metadata   map[string]*metadataInfo        // "app/revision" → metadata
	appObjs    map[serviceKey][]*store.Object
	appDirty   bool
	set        *adapter.Set        // generated objects by service, as handed to the Store
	ifaceKeys  map[serviceKey]int  // interface-level services: how many interfaces generate each
	recheck    map[serviceKey]bool // services whose interface-level presence changed
	first      adapter.FirstSync   // the first set waits for every watch's first report
	badEntries map[string]bool     // malformed records already logged
}

// serviceKey names one generated ServiceEntry: a Dubbo service
// (interface, group, version) or, with app set, a Dubbo 3 application.
type serviceKey struct {
	iface, group, version, app string
}

type ifaceState struct {
	// objs are the objects generated from providers, by service (set with
	// setInterfaceLocked, which keeps the Set in step).
	objs map[serviceKey][]*store.Object
}

// New returns an adapter that publishes through sink. logger nil means
// slog.Default().
func New(cfg Config, sink *adapter.Sink, logger *slog.Logger) (*Adapter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	sink.ExpectSkips("malformed_url", "malformed_instance", "malformed_metadata")
	if logger == nil {
		logger = slog.Default()
	}
	return &Adapter{
		cfg: cfg, sink: sink,
		log:        logger.With("registry", sink.Meta().Name, "type", "zookeeper"),
		pub:        adapter.NewPublisher(),
		ifaces:     map[string]*ifaceState{},
		apps:       map[string]map[string]*Instance{},
		mapping:    map[string][]string{},
		metadata:   map[string]*metadataInfo{},
		appObjs:    map[serviceKey][]*store.Object{},
		set:        adapter.NewSet(),
		ifaceKeys:  map[serviceKey]int{},
		recheck:    map[serviceKey]bool{},
		badEntries: map[string]bool{},
	}, nil
}

// Run connects, watches and publishes until ctx is done. ZooKeeper being
// unreachable is not an error: the last known set keeps serving while the
// client reconnects.
func (a *Adapter) Run(ctx context.Context) error {
	conns := make([]*zk.Conn, Sessions)
	var connMu sync.Mutex
	up := make([]bool, Sessions)
	closeAll := func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
	for i := range conns {
		conn, _, err := zk.Connect(a.cfg.Servers, a.cfg.SessionTimeout,
			zk.WithLogger(zkLogger{a.log}), zk.WithLogInfo(false),
			zk.WithEventCallback(func(ev zk.Event) {
				if ev.Type != zk.EventSession {
					return
				}
				switch ev.State {
				case zk.StateHasSession, zk.StateDisconnected, zk.StateExpired, zk.StateAuthFailed:
					// Connected while every session is.
					connMu.Lock()
					up[i] = ev.State == zk.StateHasSession
					a.sink.SetConnected(!slices.Contains(up, false))
					connMu.Unlock()
				}
				if ev.State == zk.StateExpired {
					a.log.Warn("zookeeper session expired; re-arming its watches", "session", i)
				}
			}))
		if err != nil {
			closeAll()
			return fmt.Errorf("zookeeper %v: %w", a.cfg.Servers, err)
		}
		conns[i] = conn
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	w := &watcher{conns: conns, retryMax: a.cfg.RetryMax,
		onError: func(p string, err error) {
			a.sink.Error(fmt.Errorf("zookeeper %s: %w", p, err))
			a.log.Debug("zookeeper read failed; keeping the last known state", "path", p, "error", err)
		}}
	ifaceSet := newWatchSet(&wg)
	a.startTree(ctx, w, &wg, ifaceSet)
	a.pub.Run(ctx, a.cfg.InitialSyncTimeout, a.sink, a.collect, a.resend)
	cancel()
	closeAll()
	wg.Wait()
	a.sink.SetConnected(false)
	return nil
}

// Sessions is how many ZooKeeper sessions an adapter reads through (its
// watches spread over them by path). Each session's replies come back one
// at a time: the first read of 10,000 interfaces' providers took 2.1–2.5 s
// through one session and 1.4–1.7 s through two, on 2 cores with the
// server beside it (BENCHMARKS.md).
const Sessions = 2

// startTree starts the root watches.
func (a *Adapter) startTree(ctx context.Context, w *watcher, wg *sync.WaitGroup, ifaceSet *watchSet) {
	root := "/" + a.cfg.Root
	a.begin(root)
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.children(ctx, root, func(children []string, _ bool) {
			want := make(map[string]bool, len(children))
			for _, c := range children {
				switch c {
				case "config", "metadata", "mapping":
					// Dubbo's own nodes under the root, not interfaces.
				default:
					want[c] = true
				}
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			stopped := ifaceSet.sync(ctx, want, func(iface string) { a.beginLocked(a.providersPath(iface)) },
				func(ctx context.Context, iface string) { a.watchProviders(ctx, w, iface) })
			for _, iface := range stopped {
				if st := a.ifaces[iface]; st != nil {
					a.setInterfaceLocked(iface, st, nil)
				}
				delete(a.ifaces, iface)
			}
			a.doneLocked(root)
			a.pub.Mark()
		})
	}()
	if a.cfg.DisableApplications {
		return
	}
	a.startApplications(ctx, w, wg)
}

func (a *Adapter) providersPath(iface string) string {
	return "/" + a.cfg.Root + "/" + iface + "/providers"
}

// watchProviders keeps one interface's providers. Each report is parsed
// and its WorkloadEntries generated outside the adapter's lock (the
// interfaces' watches run side by side: the first read of a large
// registry parses every provider at once); only the ports of the
// ServiceEntries and the Set are updated under it.
func (a *Adapter) watchProviders(ctx context.Context, w *watcher, iface string) {
	p := a.providersPath(iface)
	// known maps each provider node to its parsed URL (nil: skipped,
	// malformed or not a provider); only this watch reads and writes it.
	var known map[string]*Provider
	w.children(ctx, p, func(children []string, _ bool) {
		next := make(map[string]*Provider, len(children))
		type malformed struct {
			node string
			err  error
		}
		var bad []malformed
		for _, c := range children {
			if prov, ok := known[c]; ok {
				next[c] = prov
				continue
			}
			prov, err := ParseProviderURL(c)
			switch {
			case errors.Is(err, errNotProvider):
				prov = nil
			case err != nil:
				prov = nil
				bad = append(bad, malformed{c, err})
			}
			next[c] = prov
		}
		prepared := a.prepareInterface(iface, next)
		a.mu.Lock()
		defer a.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		st := a.ifaces[iface]
		if st == nil {
			st = &ifaceState{}
			a.ifaces[iface] = st
		}
		for _, b := range bad {
			a.malformedLocked(p+"/"+b.node, "malformed_url", "skipping malformed Dubbo provider URL", b.err)
		}
		for c := range known {
			if _, ok := next[c]; !ok {
				delete(a.badEntries, p+"/"+c)
			}
		}
		known = next
		objs := make(map[serviceKey][]*store.Object, len(prepared))
		for k, ps := range prepared {
			objs[k] = a.finishServiceLocked(ps)
		}
		a.setInterfaceLocked(iface, st, objs)
		a.doneLocked(p)
		a.pub.Mark()
	})
}

// malformedLocked logs and counts a skipped record once per record.
func (a *Adapter) malformedLocked(where, reason, msg string, err error) {
	if a.badEntries[where] {
		return
	}
	a.badEntries[where] = true
	a.log.Warn(msg, "path", where, "error", err)
	a.sink.Skip(reason)
}

// prepareInterface prepares one ServiceEntry per (group, version) of an
// interface and one WorkloadEntry per provider (finishServiceLocked
// completes them). It needs no lock.
func (a *Adapter) prepareInterface(iface string, provs map[string]*Provider) map[serviceKey]*preparedService {
	byKey := map[serviceKey][]member{}
	for _, p := range provs {
		if p == nil {
			continue
		}
		k := serviceKey{iface: p.Interface, group: p.Group, version: p.Version}
		byKey[k] = append(byKey[k], member{
			address: p.Host, eps: []Endpoint{{Port: p.Port, Protocol: p.Protocol}},
			labels: p.Labels(), weight: p.Weight, origin: p.raw, order: p.Timestamp,
		})
	}
	out := make(map[serviceKey]*preparedService, len(byKey))
	for k, ms := range byKey {
		host := InterfaceHost(k.iface, k.group, k.version, a.cfg.HostSuffix)
		out[k] = a.prepareService(host, a.providersPath(iface), ms)
	}
	return out
}

// member is one instance of a generated service.
type member struct {
	address string
	eps     []Endpoint
	labels  map[string]string
	weight  uint32
	origin  string
	order   string // orders two records of the same address: the greater wins
}

// Endpoint is one protocol port of an application instance, as in
// Dubbo's "dubbo.endpoints" metadata.
type Endpoint struct {
	Port     uint32 `json:"port"`
	Protocol string `json:"protocol"`
}

// serviceObjects builds a ServiceEntry for host and a WorkloadEntry per
// member address. It runs with a.mu held.
func (a *Adapter) serviceObjects(host, origin string, members []member) []*store.Object {
	return a.finishServiceLocked(a.prepareService(host, origin, members))
}

// preparedService is a service's objects but for its ServiceEntry, whose
// port numbers are the adapter's (a.ports) to choose.
type preparedService struct {
	host, origin, seName string
	candidates           []adapter.PortCandidate
	entries              []*store.Object
}

// prepareService groups members by address and builds their
// WorkloadEntries: each protocol is one port, and each WorkloadEntry maps
// the port name to its own. It needs no lock.
func (a *Adapter) prepareService(host, origin string, members []member) *preparedService {
	meta := a.sink.Meta()
	ports := map[string]*adapter.PortCandidate{}
	type chosen struct {
		m     member
		ports map[string]uint32
	}
	byName := map[string]chosen{}
	for _, m := range members {
		if len(m.eps) == 0 {
			continue
		}
		pm := map[string]uint32{}
		low := m.eps[0].Port
		for _, ep := range m.eps {
			proto, name := adapter.Protocol(ep.Protocol)
			if _, dup := pm[name]; dup {
				continue
			}
			pm[name] = ep.Port
			low = min(low, ep.Port)
			if ports[name] == nil {
				ports[name] = &adapter.PortCandidate{Name: name, Protocol: proto}
			}
			ports[name].Instances = append(ports[name].Instances, ep.Port)
		}
		name := adapter.ObjectName(host, m.address, strconv.Itoa(int(low)))
		if prev, dup := byName[name]; dup && cmp.Or(cmp.Compare(prev.m.order, m.order), cmp.Compare(prev.m.origin, m.origin)) > 0 {
			continue
		}
		byName[name] = chosen{m: m, ports: pm}
	}
	ps := &preparedService{host: host, origin: origin, seName: adapter.DNSName(host)}
	if len(byName) == 0 {
		return ps
	}
	for _, c := range ports {
		ps.candidates = append(ps.candidates, *c)
	}
	ps.entries = make([]*store.Object, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		c := byName[name]
		ps.entries = append(ps.entries, meta.WorkloadEntry(name, c.m.origin, ps.seName, &networking.WorkloadEntry{
			Address: c.m.address, Ports: c.ports, Labels: c.m.labels, Weight: c.m.weight,
		}, nil))
	}
	return ps
}

// finishServiceLocked returns the prepared service's objects: its
// ServiceEntry, its ports numbered by a.ports (the members' most common
// port when the service first appears, then kept), then its
// WorkloadEntries; none without members. It runs with a.mu held.
func (a *Adapter) finishServiceLocked(ps *preparedService) []*store.Object {
	if len(ps.entries) == 0 {
		return nil
	}
	sePorts := a.ports.Ports(ps.seName, ps.candidates)
	objs := make([]*store.Object, 0, len(ps.entries)+1)
	objs = append(objs, a.sink.Meta().ServiceEntry(ps.seName, ps.origin, []string{ps.host}, sePorts, nil))
	return append(objs, ps.entries...)
}

// begin marks a watch whose first report the first set waits for.
func (a *Adapter) begin(p string) {
	a.mu.Lock()
	a.beginLocked(p)
	a.mu.Unlock()
}

func (a *Adapter) beginLocked(p string) { a.first.Begin(p) }

func (a *Adapter) doneLocked(p string) { a.first.Done(p) }

// setInterfaceLocked replaces the objects one interface's providers
// generate, service by service, in the Set.
func (a *Adapter) setInterfaceLocked(iface string, st *ifaceState, objs map[serviceKey][]*store.Object) {
	for k := range st.objs {
		if _, ok := objs[k]; !ok {
			a.set.Delete(interfaceGroup(iface, k))
			if a.ifaceKeys[k]--; a.ifaceKeys[k] <= 0 {
				delete(a.ifaceKeys, k)
				a.recheck[k] = true
			}
		}
	}
	for k, o := range objs {
		if _, ok := st.objs[k]; !ok {
			if a.ifaceKeys[k]++; a.ifaceKeys[k] == 1 {
				a.recheck[k] = true
			}
		}
		a.set.Put(interfaceGroup(iface, k), o)
	}
	st.objs = objs
}

// Set groups: interface-level services sort first, so when two services
// generate one key, the interface-level one keeps it.
func interfaceGroup(iface string, k serviceKey) string { return "1\x00" + iface + "\x00" + k.String() }

func applicationGroup(k serviceKey) string { return "2\x00" + k.String() }

// String joins the key's parts.
func (k serviceKey) String() string {
	return k.iface + "\x00" + k.group + "\x00" + k.version + "\x00" + k.app
}

// collect returns the change to publish: the first, complete set waits
// until every watch started so far has reported once (or
// InitialSyncTimeout), so the Store never sees a half-read registry; later
// ones hold only the services that changed.
func (a *Adapter) collect(timedOut bool) (adapter.Change, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.first.Ready(true, timedOut, a.log) {
		return adapter.Change{}, false
	}
	a.applicationsLocked()
	c := a.set.Changes()
	a.ports.Forget(c.RemovedServices...)
	return c, true
}

// resend makes the next change the complete set.
func (a *Adapter) resend() {
	a.mu.Lock()
	a.set.Resend()
	a.mu.Unlock()
}

// applicationsLocked puts the application-level services in the Set: an
// application-level service whose key is also registered at interface
// level (Dubbo 3's default register-mode=all) is left out, so one service
// never gets two ServiceEntries. They are regenerated when an application,
// instance, mapping or metadata changed; otherwise only the services whose
// interface-level presence changed are looked at again.
func (a *Adapter) applicationsLocked() {
	check := a.recheck
	a.recheck = map[serviceKey]bool{}
	if a.appDirty {
		prev := a.appObjs
		a.appObjs = a.applicationObjectsLocked()
		a.appDirty = false
		for k := range prev {
			check[k] = true
		}
		for k := range a.appObjs {
			check[k] = true
		}
	}
	for k := range check {
		if objs := a.appObjs[k]; len(objs) > 0 && a.ifaceKeys[k] == 0 {
			a.set.Put(applicationGroup(k), objs)
		} else {
			a.set.Delete(applicationGroup(k))
		}
	}
}

// zkLogger sends the ZooKeeper client's log lines to slog at debug level.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

// joinPath joins ZooKeeper path elements.
func joinPath(elem ...string) string { return path.Join(append([]string{"/"}, elem...)...) }
