package loadgen

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Style says how a simulated proxy subscribes.
type Style string

// Subscription styles.
const (
	// StyleGRPC subscribes like a proxyless gRPC application: the listeners
	// it dials by name, then by name the routes, clusters and endpoints they
	// lead to.
	StyleGRPC Style = "grpc"
	// StyleEnvoy subscribes like Envoy: every listener and cluster
	// (wildcard), then by name the routes and endpoints they name.
	StyleEnvoy Style = "envoy"
)

// The types a proxy follows, in the order each leads to the next.
var proxyTypes = []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType}

// ProxySpec describes one simulated proxy.
type ProxySpec struct {
	ID        string
	Namespace string
	Labels    map[string]string
	// Delta selects the incremental protocol; otherwise state of the world.
	Delta bool
	Style Style
	// Listeners are the LDS names a StyleGRPC proxy asks for.
	Listeners []string
	// Sidecar makes the proxy an Envoy sidecar (no GENERATOR) with IPs
	// and WorkloadName (Shape); otherwise it is a proxyless gRPC node
	// whose WORKLOAD_NAME is its ID.
	Sidecar bool
	// Router makes the proxy a gateway's Envoy (Istio's "router~" node id,
	// no GENERATOR) with IPs and WorkloadName (ShapeRouter).
	Router       bool
	IPs          []string
	WorkloadName string
}

// NodeID returns the proxy's node id in Istio's form
// (type~IP~name.namespace~namespace.svc.cluster.local), which Istio
// requires and vmesh takes as an opaque id.
func (s ProxySpec) NodeID() string {
	ip := "10.128.0.1"
	if len(s.IPs) > 0 {
		ip = s.IPs[0]
	}
	typ := "sidecar"
	if s.Router {
		typ = "router"
	}
	return typ + "~" + ip + "~" + s.ID + "." + s.Namespace + "~" + s.Namespace + ".svc.cluster.local"
}

// Shared is what all proxies of one run share: the decoded references of
// resources already seen (by content hash: proxies of one group receive
// identical bytes), and counters.
type Shared struct {
	seed maphash.Seed
	mu   sync.Mutex
	deps map[uint64]*decoded
}

// decoded is the references of one distinct resource; done is closed once
// names is set.
type decoded struct {
	done  chan struct{}
	names []string
}

// NewShared returns an empty Shared.
func NewShared() *Shared { return &Shared{seed: maphash.MakeSeed(), deps: map[uint64]*decoded{}} }

// Proxy is one simulated ADS client. It ACKs every response, follows
// references from listeners to routes, clusters and endpoints, and tells
// Probes when a watched resource changed and the change was ACKed.
type Proxy struct {
	spec   ProxySpec
	shared *Shared
	node   *corev3.Node

	mu        sync.Mutex
	types     map[string]*typeState
	probes    map[string][]*Probe // by type URL + "\x00" + name
	synced    chan struct{}
	isSynced  bool
	responses int
}

type typeState struct {
	wildcard   bool
	sent       bool            // a first request has been sent
	subscribed map[string]bool // names asked for (not for wildcard)
	// names is subscribed, sorted, as a state-of-the-world request carries
	// it, and namesEnc its encoding; nil until needed after subscribed
	// changes (an ACK repeats them).
	names     []string
	namesEnc  []byte
	held      map[string]uint64
	deps      map[string][]string // names of the next type each held resource refers to
	version   string
	nonce     string
	responses int
}

// NewProxy returns a proxy for spec; run it with Run.
func NewProxy(spec ProxySpec, shared *Shared) *Proxy {
	md := map[string]any{"GENERATOR": "grpc", "NAMESPACE": spec.Namespace, "WORKLOAD_NAME": spec.ID}
	if spec.Sidecar || spec.Router {
		md = map[string]any{"NAMESPACE": spec.Namespace, "WORKLOAD_NAME": spec.WorkloadName, "INSTANCE_IPS": strings.Join(spec.IPs, ",")}
	}
	if len(spec.Labels) > 0 {
		l := map[string]any{}
		for k, v := range spec.Labels {
			l[k] = v
		}
		md["LABELS"] = l
	}
	st, err := structpb.NewStruct(md)
	if err != nil {
		panic(err) // strings and string maps only
	}
	p := &Proxy{
		spec: spec, shared: shared, node: &corev3.Node{Id: spec.NodeID(), Cluster: spec.Namespace, Metadata: st},
		types: map[string]*typeState{}, probes: map[string][]*Probe{}, synced: make(chan struct{}),
	}
	for _, t := range proxyTypes {
		p.types[t] = &typeState{subscribed: map[string]bool{}, held: map[string]uint64{}, deps: map[string][]string{}}
	}
	if spec.Style == StyleEnvoy {
		p.types[resourcev3.ListenerType].wildcard = true
		p.types[resourcev3.ClusterType].wildcard = true
	} else {
		for _, n := range spec.Listeners {
			p.types[resourcev3.ListenerType].subscribed[n] = true
		}
	}
	return p
}

// Spec returns the proxy's spec.
func (p *Proxy) Spec() ProxySpec { return p.spec }

// Synced is closed once the proxy holds every resource it subscribed to.
func (p *Proxy) Synced() <-chan struct{} { return p.synced }

// Held returns how many resources of a type the proxy holds.
func (p *Proxy) Held(typeURL string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.types[typeURL].held)
}

// Responses returns how many responses the proxy has received.
func (p *Proxy) Responses() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.responses
}

// Watch registers pr with the proxy if the proxy holds one of pr's
// resources; the proxy then records in pr the moment it ACKs the first
// response that changes one of them. It reports whether it registered.
func (p *Proxy) Watch(pr *Probe) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr.Requires.TypeURL != "" {
		if _, ok := p.types[pr.Requires.TypeURL].held[pr.Requires.Name]; !ok {
			return false
		}
	}
	ts := p.types[pr.TypeURL]
	names := pr.Names
	for _, n := range names {
		if _, ok := ts.held[n]; ok {
			for _, m := range names {
				k := pr.TypeURL + "\x00" + m
				p.probes[k] = append(p.probes[k], pr)
			}
			return true
		}
	}
	return false
}

// Run runs the proxy's ADS stream on conn until ctx ends or the stream fails.
func (p *Proxy) Run(ctx context.Context, conn grpc.ClientConnInterface) error {
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	var err error
	if p.spec.Delta {
		err = p.runDelta(ctx, ads)
	} else {
		err = p.runSotW(ctx, ads)
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("proxy %s: %w", p.spec.ID, err)
}

func (p *Proxy) runSotW(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	first := true
	send := func(typeURL string) error {
		req := p.sotwRequest(typeURL)
		if req == nil {
			return nil
		}
		if first {
			req.head.Node, first = p.node, false
		}
		return stream.SendMsg(req)
	}
	for _, t := range proxyTypes {
		if err := send(t); err != nil {
			return err
		}
	}
	var in sotwResponse
	for {
		if err := stream.RecvMsg(&in); err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("stream closed by server")
			}
			return err
		}
		resp := &in.msg
		fire, next := p.applySotW(resp)
		if err := send(resp.GetTypeUrl()); err != nil { // the ACK
			return err
		}
		p.fire(fire, time.Now())
		for _, t := range next {
			if err := send(t); err != nil {
				return err
			}
		}
		p.checkSynced()
	}
}

// sotwRequest returns the request for a type carrying the current
// subscription and the last accepted version and nonce, or nil when the
// proxy has nothing to ask for yet (an empty first request would mean
// wildcard).
func (p *Proxy) sotwRequest(typeURL string) *encodedRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts := p.types[typeURL]
	if !ts.wildcard && len(ts.subscribed) == 0 {
		return nil
	}
	ts.sent = true
	req := &encodedRequest{head: &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: ts.version, ResponseNonce: ts.nonce}}
	if !ts.wildcard {
		if ts.names == nil {
			ts.names = slices.Sorted(maps.Keys(ts.subscribed))
			ts.namesEnc = encodeNames(ts.names)
		}
		req.names = ts.namesEnc
	}
	return req
}

func (p *Proxy) runDelta(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	first := true
	for _, t := range proxyTypes {
		p.mu.Lock()
		ts := p.types[t]
		var req *discoveryv3.DeltaDiscoveryRequest
		switch {
		case ts.wildcard:
			req = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesSubscribe: []string{"*"}}
		case len(ts.subscribed) > 0:
			req = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesSubscribe: slices.Sorted(maps.Keys(ts.subscribed))}
		}
		if req != nil {
			ts.sent = true
		}
		p.mu.Unlock()
		if req == nil {
			continue
		}
		if first {
			req.Node, first = p.node, false
		}
		if err := stream.Send(req); err != nil {
			return err
		}
	}
	var in deltaResponse
	for {
		if err := stream.RecvMsg(&in); err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("stream closed by server")
			}
			return err
		}
		resp := &in.msg
		fire, subs := p.applyDelta(resp)
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
			return err
		}
		p.fire(fire, time.Now())
		for _, req := range subs {
			if first {
				req.Node, first = p.node, false
			}
			if err := stream.Send(req); err != nil {
				return err
			}
		}
		p.checkSynced()
	}
}

// update is one resource of a response: its name and serialised form.
type update struct {
	name  string
	bytes []byte
}

// applySotW records a state-of-the-world response. It returns the probes
// to fire once the response is ACKed and the types whose subscription
// changed. Listeners and clusters are full state (a name missing is
// deleted); routes and endpoints are not.
func (p *Proxy) applySotW(resp *discoveryv3.DiscoveryResponse) ([]*Probe, []string) {
	ups := make([]update, 0, len(resp.GetResources()))
	for _, a := range resp.GetResources() {
		ups = append(ups, update{name: resourceName(a.GetValue()), bytes: a.GetValue()})
	}
	t := resp.GetTypeUrl()
	p.mu.Lock()
	defer p.mu.Unlock()
	ts, ok := p.types[t]
	if !ok {
		return nil, nil
	}
	ts.version, ts.nonce = resp.GetVersionInfo(), resp.GetNonce()
	var removed []string
	if t == resourcev3.ListenerType || t == resourcev3.ClusterType {
		in := make(map[string]bool, len(ups))
		for _, u := range ups {
			in[u.name] = true
		}
		for n := range ts.held {
			if !in[n] {
				removed = append(removed, n)
			}
		}
	}
	fire := p.applyLocked(t, ts, ups, removed)
	var next []string
	if nt := p.refreshLocked(t); nt != "" {
		next = append(next, nt)
	}
	return fire, next
}

// applyDelta records a delta response and returns the probes to fire and
// the subscription requests to send.
func (p *Proxy) applyDelta(resp *discoveryv3.DeltaDiscoveryResponse) ([]*Probe, []*discoveryv3.DeltaDiscoveryRequest) {
	ups := make([]update, 0, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		ups = append(ups, update{name: r.GetName(), bytes: r.GetResource().GetValue()})
	}
	t := resp.GetTypeUrl()
	p.mu.Lock()
	defer p.mu.Unlock()
	ts, ok := p.types[t]
	if !ok {
		return nil, nil
	}
	ts.version, ts.nonce = resp.GetSystemVersionInfo(), resp.GetNonce()
	fire := p.applyLocked(t, ts, ups, resp.GetRemovedResources())
	var reqs []*discoveryv3.DeltaDiscoveryRequest
	nt := p.typeAfter(t)
	if nt == "" {
		return fire, nil
	}
	nts := p.types[nt]
	before := maps.Clone(nts.subscribed)
	if p.refreshLocked(t) == "" {
		return fire, nil
	}
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: nt}
	for n := range nts.subscribed {
		if !before[n] {
			req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
		}
	}
	for n := range before {
		if !nts.subscribed[n] {
			req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
		}
	}
	slices.Sort(req.ResourceNamesSubscribe)
	slices.Sort(req.ResourceNamesUnsubscribe)
	nts.sent = true
	return fire, append(reqs, req)
}

// applyLocked updates held resources and their references and returns the
// probes whose resources changed. Callers hold p.mu.
func (p *Proxy) applyLocked(t string, ts *typeState, ups []update, removed []string) []*Probe {
	p.responses++
	ts.responses++
	var fire []*Probe
	changed := func(name string) {
		if len(p.probes) == 0 {
			return
		}
		k := t + "\x00" + name
		if prs := p.probes[k]; len(prs) > 0 {
			fire = append(fire, prs...)
			for _, pr := range prs {
				for _, n := range pr.Names {
					kk := t + "\x00" + n
					p.probes[kk] = slices.DeleteFunc(p.probes[kk], func(x *Probe) bool { return x == pr })
					if len(p.probes[kk]) == 0 {
						delete(p.probes, kk)
					}
				}
			}
		}
	}
	for _, u := range ups {
		h := maphash.Bytes(p.shared.seed, u.bytes)
		old, had := ts.held[u.name]
		if had && old == h {
			continue
		}
		ts.held[u.name] = h
		if t != resourcev3.EndpointType {
			ts.deps[u.name] = p.shared.refs(t, h, u.bytes)
		}
		if had {
			changed(u.name)
		}
	}
	for _, n := range removed {
		if _, ok := ts.held[n]; ok {
			delete(ts.held, n)
			delete(ts.deps, n)
			changed(n)
		}
	}
	return fire
}

// typeAfter returns the type a type's resources refer to, when the proxy
// subscribes to it by name.
func (p *Proxy) typeAfter(t string) string {
	switch t {
	case resourcev3.ListenerType:
		return resourcev3.RouteType
	case resourcev3.RouteType:
		if p.spec.Style == StyleEnvoy {
			return "" // Envoy asks for every cluster
		}
		return resourcev3.ClusterType
	case resourcev3.ClusterType:
		return resourcev3.EndpointType
	}
	return ""
}

// refreshLocked recomputes the by-name subscription of the type after t
// from what the proxy holds of t, and returns that type if it changed.
// Names no longer subscribed are dropped from what the proxy holds.
func (p *Proxy) refreshLocked(t string) string {
	nt := p.typeAfter(t)
	if nt == "" {
		return ""
	}
	ts, nts := p.types[t], p.types[nt]
	want := map[string]bool{}
	for _, ds := range ts.deps {
		for _, d := range ds {
			want[d] = true
		}
	}
	if maps.Equal(want, nts.subscribed) {
		return ""
	}
	if len(want) == 0 && !p.spec.Delta {
		// An empty state-of-the-world request would mean wildcard: keep the
		// old subscription; the server removes nothing the proxy relies on.
		return ""
	}
	nts.subscribed, nts.names, nts.namesEnc = want, nil, nil
	for n := range nts.held {
		if !want[n] {
			delete(nts.held, n)
			delete(nts.deps, n)
		}
	}
	return nt
}

func (p *Proxy) fire(prs []*Probe, at time.Time) {
	for _, pr := range prs {
		pr.record(at)
	}
}

// checkSynced closes Synced once every type has been answered and every
// by-name subscription is held.
func (p *Proxy) checkSynced() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isSynced {
		return
	}
	for _, t := range proxyTypes {
		ts := p.types[t]
		if ts.wildcard || t == resourcev3.ListenerType {
			if ts.responses == 0 {
				return
			}
			continue
		}
		for n := range ts.subscribed {
			if _, ok := ts.held[n]; !ok {
				return
			}
		}
	}
	p.isSynced = true
	close(p.synced)
}

// refs returns the names of the next type that a resource refers to,
// decoding each distinct resource once per run: the proxies of a group
// receive the same bytes at once, and those that ask while the first
// decodes them wait for its answer (on 2 cores, a thousand sidecars each
// decoding the same 300 KB route configuration took more CPU than the
// server that sent it).
func (s *Shared) refs(t string, h uint64, b []byte) []string {
	key := h ^ uint64(len(t))*0x9e3779b97f4a7c15
	s.mu.Lock()
	d, ok := s.deps[key]
	if !ok {
		d = &decoded{done: make(chan struct{})}
		s.deps[key] = d
	}
	s.mu.Unlock()
	if ok {
		<-d.done
		return d.names
	}
	d.names = decodeRefs(t, b)
	close(d.done)
	return d.names
}

// decodeRefs returns the route configurations a listener names, the
// clusters a route configuration routes to, or the EDS name of a cluster.
func decodeRefs(t string, b []byte) []string {
	var out []string
	switch t {
	case resourcev3.ListenerType:
		var l listenerv3.Listener
		if proto.Unmarshal(b, &l) != nil {
			return nil
		}
		hcms := []*anypb.Any{l.GetApiListener().GetApiListener()}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcms = append(hcms, f.GetTypedConfig())
			}
		}
		for _, a := range hcms {
			var h hcmv3.HttpConnectionManager
			if a == nil || !a.MessageIs(&h) || a.UnmarshalTo(&h) != nil {
				continue
			}
			if n := h.GetRds().GetRouteConfigName(); n != "" {
				out = append(out, n)
			}
		}
	case resourcev3.RouteType:
		var rc routev3.RouteConfiguration
		if proto.Unmarshal(b, &rc) != nil {
			return nil
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				a := r.GetRoute()
				if c := a.GetCluster(); c != "" {
					out = append(out, c)
				}
				for _, w := range a.GetWeightedClusters().GetClusters() {
					out = append(out, w.GetName())
				}
			}
		}
	case resourcev3.ClusterType:
		var c clusterv3.Cluster
		if proto.Unmarshal(b, &c) != nil {
			return nil
		}
		if c.GetType() == clusterv3.Cluster_EDS {
			n := c.GetEdsClusterConfig().GetServiceName()
			if n == "" {
				n = c.GetName()
			}
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// resourceName reads field 1, the name of a Listener, RouteConfiguration,
// Cluster and ClusterLoadAssignment, without decoding the rest.
func resourceName(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return ""
			}
			return string(v)
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return ""
		}
		b = b[m:]
	}
	return ""
}

// Probe collects, for one change, when each affected proxy ACKed it.
type Probe struct {
	// TypeURL and Names are the resources the change alters.
	TypeURL string
	Names   []string
	// Requires, when set, limits the probe to proxies that hold that
	// resource: an Envoy sidecar's route configuration of a port changes
	// with a service's routes only if it sees the service (holds its
	// cluster).
	Requires struct{ TypeURL, Name string }

	mu    sync.Mutex
	start time.Time
	want  int
	armed bool
	got   []time.Duration
	done  chan struct{}
}

// NewProbe returns a probe for a change of the named resources of one type.
func NewProbe(typeURL string, names ...string) *Probe {
	return &Probe{TypeURL: typeURL, Names: names, done: make(chan struct{})}
}

// Arm sets how many proxies are expected to ACK and the moment the change
// was made; latencies count from start.
func (pr *Probe) Arm(want int, start time.Time) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.want, pr.start, pr.armed = want, start, true
	for i := range pr.got {
		// Recorded before Arm: got holds absolute times as offsets from zero.
		pr.got[i] -= time.Duration(start.UnixNano())
	}
	pr.closeIfDoneLocked()
}

func (pr *Probe) record(at time.Time) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.armed {
		pr.got = append(pr.got, at.Sub(pr.start))
	} else {
		pr.got = append(pr.got, time.Duration(at.UnixNano()))
	}
	pr.closeIfDoneLocked()
}

func (pr *Probe) closeIfDoneLocked() {
	if pr.armed && len(pr.got) >= pr.want {
		select {
		case <-pr.done:
		default:
			close(pr.done)
		}
	}
}

// Wait waits until every expected proxy has ACKed or ctx ends, and returns
// the latencies recorded so far.
func (pr *Probe) Wait(ctx context.Context) []time.Duration {
	select {
	case <-pr.done:
	case <-ctx.Done():
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return slices.Clone(pr.got)
}
