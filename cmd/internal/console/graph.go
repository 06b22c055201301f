package console

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// Kinds of graph nodes.
const (
	NodeService  = "service"  // a host of a ServiceEntry
	NodeSubset   = "subset"   // a route destination: a host's subset, or all its endpoints
	NodeWorkload = "workload" // connected proxies that no ServiceEntry selects
	NodeExternal = "external" // a host traffic goes to that no ServiceEntry defines
	NodeUnknown  = "unknown"  // callers the metrics do not name
)

// Kinds of graph edges.
const (
	EdgeRoute   = "route"   // a VirtualService route destination, with its weight
	EdgeTraffic = "traffic" // requests the metrics saw from a caller to a host
)

// Graph is the service graph page's data.
type Graph struct {
	Revision int64
	Nodes    []*GraphNode
	Edges    []*GraphEdge
	// Width and Height are the drawing's size in pixels.
	Width, Height int
	// Traffic is what the rates on the edges come from; nil without
	// --prometheus.
	Traffic *TrafficStatus
}

// GraphNode is one node of the graph.
type GraphNode struct {
	ID    string
	Kind  string
	Label string
	// Detail is the line under the label: the namespace, a subset's host.
	Detail string
	// Namespace is the node's namespace ("" for external and unknown).
	Namespace string
	// Proxies are the ids of its connected proxies (services and
	// workloads), sorted; Identities their SPIFFE IDs.
	Proxies    []string
	Identities []string
	// Policies are the AuthorizationPolicies that apply to its workloads.
	Policies []PolicyMark
	// Denies names the callers in the graph its policies deny, and how.
	Denies []string
	// Origin is where the node's ServiceEntry is defined.
	Origin store.Origin

	// X, Y, W, H place the node's box in the drawing.
	X, Y, W, H int
	rank       int
	// labels of its workloads, for the policies of a caller.
	workloadLabels []map[string]string
	sources        []sourceIdentity
}

// PolicyMark is one AuthorizationPolicy on a node.
type PolicyMark struct {
	Namespace, Name string
	Action          string
	DryRun          bool
	// Summary says what it denies, in a few words.
	Summary string
	Origin  store.Origin
}

// GraphEdge is one edge of the graph.
type GraphEdge struct {
	From, To string
	Kind     string
	// Routes names the VirtualService rules that make a route edge, each
	// with its weight: "default/reviews http[0] 80%".
	Routes []string
	// Weight is the first route's weight in percent.
	Weight int32
	// Problem says why a route's traffic fails (an undefined subset, a
	// host without a ServiceEntry), or "".
	Problem string
	// Denied is "denied" or "partly denied" when the destination's
	// AuthorizationPolicies deny the caller's requests (all of them, or
	// some: rules with to or when, or with fields the graph cannot
	// judge), with the policies in DeniedBy.
	Denied   string
	DeniedBy []string
	// HasRate: the metrics answered for this edge; Rate and Errors are
	// requests per second (all, and failed).
	HasRate      bool
	Rate, Errors float64
	// Path is the SVG path of the edge; LabelX, LabelY place its label.
	Path           string
	LabelX, LabelY int
}

// RateText renders the edge's request rate.
func (e *GraphEdge) RateText() string {
	if !e.HasRate {
		return ""
	}
	return formatRate(e.Rate) + " rps"
}

// ErrorText renders the edge's error rate: failed requests per second and
// their share.
func (e *GraphEdge) ErrorText() string {
	if !e.HasRate {
		return ""
	}
	if e.Rate <= 0 {
		return formatRate(e.Errors) + " rps"
	}
	return fmt.Sprintf("%s rps (%s%%)", formatRate(e.Errors), formatRate(100*e.Errors/e.Rate))
}

// Label is what the drawing writes on the edge.
func (e *GraphEdge) Label() string {
	var parts []string
	if e.Kind == EdgeRoute {
		parts = append(parts, strconv.Itoa(int(e.Weight))+"%")
	}
	if e.HasRate {
		parts = append(parts, e.RateText())
		if e.Errors > 0 {
			parts = append(parts, "err "+e.ErrorText())
		}
	}
	if e.Denied != "" {
		parts = append(parts, e.Denied)
	}
	return strings.Join(parts, " · ")
}

// Class is the edge's CSS classes in the drawing.
func (e *GraphEdge) Class() string {
	c := "edge " + e.Kind
	switch {
	case e.Denied == "denied":
		c += " denied"
	case e.Denied != "":
		c += " partly"
	}
	if e.Errors > 0 || e.Problem != "" {
		c += " failing"
	}
	return c
}

func formatRate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 0.01:
		return strconv.FormatFloat(v, 'g', 2, 64)
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func (Graph) title() string { return "Graph" }

// sourceIdentity is one proxy of a caller, as an AuthorizationPolicy
// sees it.
type sourceIdentity struct {
	namespace, principal string
}

// graphBuilder collects nodes and edges.
type graphBuilder struct {
	td    string
	fs    *store.Snapshot
	ms    *model.Snapshot
	nodes map[string]*GraphNode
	edges map[[2]string]*GraphEdge
	// byProxy maps a connected proxy's id to its node.
	byProxy map[string]string
}

func (c *Console) graph(ctx context.Context) Graph {
	fs := c.src.Store.Snapshot()
	ms := c.modelFor(fs)
	var proxies []xds.SyncStatus
	if c.src.Syncz != nil {
		proxies = c.src.Syncz()
	}
	b := &graphBuilder{td: c.src.TrustDomain, fs: fs, ms: ms, nodes: map[string]*GraphNode{}, edges: map[[2]string]*GraphEdge{}, byProxy: map[string]string{}}
	b.services()
	b.proxies(proxies)
	b.routes()
	g := Graph{Revision: ms.Revision}
	if c.traffic != nil {
		var hosts []string
		for _, s := range ms.Services {
			hosts = append(hosts, s.Hostname)
		}
		st, samples := c.traffic.query(ctx, hosts)
		g.Traffic = &st
		b.traffic(samples)
	}
	b.policies()
	g.Nodes, g.Edges = b.sorted()
	g.Width, g.Height = layout(g.Nodes, g.Edges)
	return g
}

// ServiceNodeID, SubsetNodeID, WorkloadNodeID name graph nodes.
func ServiceNodeID(host string) string { return "svc:" + host }

// SubsetNodeID is the node of a route destination: a host's subset, or
// (subset "") all its endpoints.
func SubsetNodeID(host, subset string) string { return "dst:" + host + "|" + subset }

// WorkloadNodeID is the node of the connected proxies of a namespace that
// no ServiceEntry selects, by their app label (else their id).
func WorkloadNodeID(ns, name string) string { return "wl:" + ns + "/" + name }

func (b *graphBuilder) node(id string, mk func() *GraphNode) *GraphNode {
	if n, ok := b.nodes[id]; ok {
		return n
	}
	n := mk()
	n.ID = id
	b.nodes[id] = n
	return n
}

// services adds a node per host.
func (b *graphBuilder) services() {
	for _, s := range b.ms.Services {
		n := b.node(ServiceNodeID(s.Hostname), func() *GraphNode {
			return &GraphNode{Kind: NodeService, Label: s.Hostname, Namespace: s.Namespace, Detail: "ServiceEntry " + s.Namespace + "/" + s.Name}
		})
		if se := b.fs.Get(store.Key{Kind: store.KindServiceEntry, Namespace: s.Namespace, Name: s.Name}); se != nil {
			n.Origin = se.Origin
			if spec, ok := se.Spec.(*networking.ServiceEntry); ok && len(spec.GetWorkloadSelector().GetLabels()) > 0 {
				n.workloadLabels = append(n.workloadLabels, spec.GetWorkloadSelector().GetLabels())
			}
		}
		for _, e := range s.Endpoints {
			if len(e.Labels) > 0 {
				n.workloadLabels = append(n.workloadLabels, e.Labels)
			}
		}
	}
}

// proxies places every connected proxy (not a VM agent's own stream) on
// the services whose ServiceEntry selects it (its namespace, its labels,
// or a WorkloadEntry named as its node), else on a workload node.
func (b *graphBuilder) proxies(all []xds.SyncStatus) {
	for _, p := range all {
		if p.Agent() {
			continue
		}
		labels := parseLabels(p.Labels)
		var placed []string
		for _, s := range b.ms.Services {
			if s.Namespace == p.Namespace && b.serves(s, p.ID, labels) && !slices.Contains(placed, ServiceNodeID(s.Hostname)) {
				placed = append(placed, ServiceNodeID(s.Hostname))
			}
		}
		if len(placed) == 0 {
			name := labels["app"]
			if name == "" {
				name = p.ID
			}
			id := WorkloadNodeID(p.Namespace, name)
			b.node(id, func() *GraphNode {
				return &GraphNode{Kind: NodeWorkload, Label: name, Namespace: p.Namespace, Detail: "workload in " + p.Namespace}
			})
			placed = []string{id}
		}
		b.byProxy[p.ID] = placed[0]
		src := sourceIdentity{namespace: p.Namespace}
		if p.ServiceAccount != "" {
			src.principal = b.td + "/ns/" + p.Namespace + "/sa/" + p.ServiceAccount
		}
		for _, id := range placed {
			n := b.nodes[id]
			n.Proxies = append(n.Proxies, p.ID)
			if src.principal != "" && !slices.Contains(n.Identities, "spiffe://"+src.principal) {
				n.Identities = append(n.Identities, "spiffe://"+src.principal)
			}
			if !slices.Contains(n.sources, src) {
				n.sources = append(n.sources, src)
			}
			if n.Kind == NodeWorkload && len(labels) > 0 {
				n.workloadLabels = append(n.workloadLabels, labels)
			}
		}
	}
}

// serves reports whether the proxy id with labels is a workload of s.
func (b *graphBuilder) serves(s *model.Service, id string, labels map[string]string) bool {
	se := b.fs.Get(store.Key{Kind: store.KindServiceEntry, Namespace: s.Namespace, Name: s.Name})
	if se != nil {
		if spec, ok := se.Spec.(*networking.ServiceEntry); ok && len(spec.GetWorkloadSelector().GetLabels()) > 0 &&
			model.LabelsMatch(spec.GetWorkloadSelector().GetLabels(), labels) {
			return true
		}
	}
	for _, e := range s.Endpoints {
		if e.Origin == s.Namespace+"/"+id {
			return true
		}
	}
	return false
}

func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// routes adds an edge per VirtualService route destination of each host:
// host -> (destination host, subset), with the route's weight.
func (b *graphBuilder) routes() {
	for _, s := range b.ms.Services {
		vs := b.ms.VirtualServiceFor(s.Hostname, s.Namespace)
		if vs == nil {
			continue
		}
		from := ServiceNodeID(s.Hostname)
		vsName := vs.Namespace + "/" + vs.Name
		for i, r := range vs.Spec.GetHttp() {
			b.routeEdges(from, s, vs, fmt.Sprintf("%s http[%d]%s", vsName, i, named(r.GetName())), httpDestinations(r.GetRoute()))
		}
		for i, r := range vs.Spec.GetTcp() {
			b.routeEdges(from, s, vs, fmt.Sprintf("%s tcp[%d]", vsName, i), tcpDestinations(r.GetRoute()))
		}
		for i, r := range vs.Spec.GetTls() {
			b.routeEdges(from, s, vs, fmt.Sprintf("%s tls[%d]", vsName, i), tcpDestinations(r.GetRoute()))
		}
	}
}

func named(n string) string {
	if n == "" {
		return ""
	}
	return " " + strconv.Quote(n)
}

type weighted struct {
	d      *networking.Destination
	weight int32
}

func httpDestinations(rs []*networking.HTTPRouteDestination) []weighted {
	var out []weighted
	for _, r := range rs {
		out = append(out, weighted{r.GetDestination(), r.GetWeight()})
	}
	return out
}

func tcpDestinations(rs []*networking.RouteDestination) []weighted {
	var out []weighted
	for _, r := range rs {
		out = append(out, weighted{r.GetDestination(), r.GetWeight()})
	}
	return out
}

// routeEdges adds the destinations of one route rule. A lone destination
// takes all the traffic (Istio's weight 100).
func (b *graphBuilder) routeEdges(from string, s *model.Service, vs *model.VirtualService, rule string, ds []weighted) {
	for _, w := range ds {
		if w.d == nil {
			continue
		}
		weight := w.weight
		if len(ds) == 1 {
			weight = 100
		}
		dh := model.DestinationHost(w.d.GetHost(), vs.Namespace)
		subset := w.d.GetSubset()
		label, detail := subset, dh
		if subset == "" {
			label = "all endpoints"
		}
		problem := ""
		switch {
		case len(b.ms.ServicesForHost(dh)) == 0:
			problem = "no ServiceEntry defines " + dh
		case subset != "" && b.ms.DestinationRuleFor(dh, s.Namespace, b.ms.ServicesForHost(dh)[0].Namespace).Subset(subset) == nil:
			problem = "no DestinationRule defines subset " + subset + " of " + dh
		}
		to := SubsetNodeID(dh, subset)
		b.node(to, func() *GraphNode {
			return &GraphNode{Kind: NodeSubset, Label: label, Detail: detail, Namespace: s.Namespace}
		})
		e := b.edge(from, to, EdgeRoute)
		if len(e.Routes) == 0 {
			e.Weight = weight
		}
		e.Routes = append(e.Routes, fmt.Sprintf("%s %d%%", rule, weight))
		if problem != "" {
			e.Problem = problem
		}
	}
}

func (b *graphBuilder) edge(from, to, kind string) *GraphEdge {
	k := [2]string{from, to}
	if e, ok := b.edges[k]; ok {
		return e
	}
	e := &GraphEdge{From: from, To: to, Kind: kind}
	b.edges[k] = e
	return e
}

// policies marks, on each service, the AuthorizationPolicies its
// workloads take, and on each edge from a caller the graph knows whether
// they deny it.
func (b *graphBuilder) policies() {
	for _, n := range b.nodes {
		if n.Kind != NodeService && n.Kind != NodeWorkload {
			continue
		}
		seen := map[string]bool{}
		var aps []*model.AuthorizationPolicy
		for _, l := range n.workloadLabels {
			for _, ap := range b.ms.AuthorizationPoliciesFor(n.Namespace, l) {
				if !seen[ap.Key()] {
					seen[ap.Key()] = true
					aps = append(aps, ap)
				}
			}
		}
		if len(n.workloadLabels) == 0 && n.Namespace != "" {
			aps = append(aps, b.ms.AuthorizationPoliciesFor(n.Namespace, nil)...)
		}
		slices.SortFunc(aps, func(a, b *model.AuthorizationPolicy) int { return strings.Compare(a.Key(), b.Key()) })
		for _, ap := range aps {
			m := PolicyMark{Namespace: ap.Namespace, Name: ap.Name, Action: ap.Action.String(), DryRun: ap.DryRun, Summary: policySummary(ap)}
			if o := b.fs.Get(store.Key{Kind: store.KindAuthorizationPolicy, Namespace: ap.Namespace, Name: ap.Name}); o != nil {
				m.Origin = o.Origin
			}
			n.Policies = append(n.Policies, m)
		}
		if len(aps) == 0 {
			continue
		}
		// Every caller in the graph, and every edge into the node.
		for _, src := range b.nodes {
			if src == n || (src.Kind != NodeService && src.Kind != NodeWorkload) || len(src.sources) == 0 {
				continue
			}
			verdict, by := judge(aps, src.sources)
			if verdict != "" {
				n.Denies = append(n.Denies, fmt.Sprintf("%s: %s by %s", src.Label, verdict, strings.Join(by, ", ")))
			}
		}
		slices.Sort(n.Denies)
		for _, e := range b.edges {
			if e.To != n.ID || e.Kind != EdgeTraffic {
				continue
			}
			srcs := []sourceIdentity{{}} // a caller the metrics do not name: no identity
			if from := b.nodes[e.From]; from != nil && len(from.sources) > 0 {
				srcs = from.sources
			}
			e.Denied, e.DeniedBy = judge(aps, srcs)
		}
	}
}

// policySummary says in a few words what a policy denies.
func policySummary(ap *model.AuthorizationPolicy) string {
	switch {
	case ap.DryRun:
		return "dry run: enforces nothing"
	case ap.Action == security.AuthorizationPolicy_ALLOW && len(ap.Rules) == 0:
		return "allows nothing: denies every request"
	case ap.Action == security.AuthorizationPolicy_ALLOW:
		return "denies every request no ALLOW rule matches"
	case ap.Action == security.AuthorizationPolicy_DENY && len(ap.Rules) == 0:
		return "denies nothing (no rules)"
	case ap.Action == security.AuthorizationPolicy_DENY:
		return "denies the requests its rules match"
	case ap.Action == security.AuthorizationPolicy_CUSTOM:
		return "asks " + ap.Provider + " (CUSTOM)"
	}
	return "audits: denies nothing"
}

// judge says whether the policies deny requests from every one of srcs'
// proxies ("denied"), from some or some of their requests ("partly
// denied"), or none (""), with the policies that do.
func judge(aps []*model.AuthorizationPolicy, srcs []sourceIdentity) (string, []string) {
	deniedAll, deniedSome := true, false
	var by []string
	for _, src := range srcs {
		all, some, who := judgeOne(aps, src)
		deniedAll = deniedAll && all
		deniedSome = deniedSome || some || all
		for _, w := range who {
			if !slices.Contains(by, w) {
				by = append(by, w)
			}
		}
	}
	switch {
	case deniedAll && deniedSome:
		return "denied", by
	case deniedSome:
		return "partly denied", by
	}
	return "", nil
}

// judgeOne evaluates the policies for one caller: all its requests are
// denied, or some may be.
func judgeOne(aps []*model.AuthorizationPolicy, src sourceIdentity) (all, some bool, by []string) {
	allowAll, allowSome, anyAllow := false, false, false
	var allowers []string
	for _, ap := range aps {
		if ap.DryRun {
			continue
		}
		switch ap.Action {
		case security.AuthorizationPolicy_DENY, security.AuthorizationPolicy_CUSTOM:
			for _, r := range ap.Rules {
				switch matchRule(r, src) {
				case matchAll:
					all = true
					by = append(by, ap.Key())
				case matchSome:
					some = true
					by = append(by, ap.Key())
				}
			}
		case security.AuthorizationPolicy_ALLOW:
			anyAllow = true
			allowers = append(allowers, ap.Key())
			for _, r := range ap.Rules {
				switch matchRule(r, src) {
				case matchAll:
					allowAll = true
				case matchSome:
					allowSome = true
				}
			}
		}
	}
	if anyAllow && !allowAll {
		if allowSome {
			some = true
		} else {
			all = true
		}
		by = append(by, allowers...)
	}
	slices.Sort(by)
	return all, some, slices.Compact(by)
}

const (
	matchNone = iota
	matchSome
	matchAll
)

// matchRule says whether a rule matches every request of src (its from
// matches and it has no to or when), some (to, when, or a source field
// the graph cannot judge), or none.
func matchRule(r *security.Rule, src sourceIdentity) int {
	m := matchAll
	if len(r.GetFrom()) > 0 {
		best := matchNone
		for _, f := range r.GetFrom() {
			best = max(best, matchSource(f.GetSource(), src))
		}
		m = best
	}
	if m != matchNone && (len(r.GetTo()) > 0 || len(r.GetWhen()) > 0) {
		m = matchSome
	}
	return m
}

func matchSource(s *security.Source, src sourceIdentity) int {
	if s == nil {
		return matchAll
	}
	in := func(values []string, v string) bool {
		return v != "" && slices.ContainsFunc(values, func(p string) bool { return globMatch(p, v) })
	}
	// The namespace comes from the caller's certificate: none without an
	// identity.
	ns := ""
	if src.principal != "" {
		ns = src.namespace
	}
	switch {
	case len(s.GetPrincipals()) > 0 && !in(s.GetPrincipals(), src.principal),
		len(s.GetNotPrincipals()) > 0 && in(s.GetNotPrincipals(), src.principal),
		len(s.GetNamespaces()) > 0 && !in(s.GetNamespaces(), ns),
		len(s.GetNotNamespaces()) > 0 && in(s.GetNotNamespaces(), ns):
		return matchNone
	case len(s.GetIpBlocks()) > 0 || len(s.GetNotIpBlocks()) > 0 || len(s.GetRemoteIpBlocks()) > 0 ||
		len(s.GetNotRemoteIpBlocks()) > 0 || len(s.GetRequestPrincipals()) > 0 || len(s.GetNotRequestPrincipals()) > 0:
		return matchSome
	}
	return matchAll
}

// globMatch is Istio's string match of principals and namespaces: exact,
// "*", "prefix*" or "*suffix".
func globMatch(pattern, v string) bool {
	switch {
	case pattern == "*":
		return v != ""
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(v, pattern[1:])
	case strings.HasSuffix(pattern, "*"):
		return strings.HasPrefix(v, pattern[:len(pattern)-1])
	}
	return pattern == v
}

// sorted returns the nodes and edges in a stable order.
func (b *graphBuilder) sorted() ([]*GraphNode, []*GraphEdge) {
	nodes := make([]*GraphNode, 0, len(b.nodes))
	for _, n := range b.nodes {
		slices.Sort(n.Proxies)
		slices.Sort(n.Identities)
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b *GraphNode) int { return strings.Compare(a.ID, b.ID) })
	edges := make([]*GraphEdge, 0, len(b.edges))
	for _, e := range b.edges {
		edges = append(edges, e)
	}
	slices.SortFunc(edges, func(a, b *GraphEdge) int {
		return cmp.Or(strings.Compare(a.From, b.From), strings.Compare(a.To, b.To))
	})
	return nodes, edges
}
