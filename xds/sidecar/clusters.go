package sidecar

//lint:file-ignore SA1019 Istio's deprecated fields (minimumRingSize, consecutiveErrors) are read because Istio still honours them

import (
	"math"
	"net/netip"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	caresv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/network/dns_resolver/cares/v3"
	proxyprotocolv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/translate"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Clusters returns a sidecar's clusters: PassthroughCluster and
// BlackHoleCluster; one outbound cluster per visible service port and
// DestinationRule subset; InboundPassthroughCluster and one inbound cluster
// per workload port.
//
// It is OutboundClusters followed by InboundClusters.
func Clusters(v *model.View) ([]*clusterv3.Cluster, error) {
	out, err := OutboundClusters(v)
	if err != nil {
		return nil, err
	}
	in, err := InboundClusters(v)
	if err != nil {
		return nil, err
	}
	return append(out, in...), nil
}

// OutboundClusters returns the clusters that depend only on the proxy's
// scope (model.View.OutboundKey): PassthroughCluster, BlackHoleCluster and
// the outbound clusters.
func OutboundClusters(v *model.View) ([]*clusterv3.Cluster, error) {
	return append(FixedClusters(v), ClustersOf(v, v.Clusters())...), nil
}

// FixedClusters returns the outbound clusters every sidecar has whatever
// its services: PassthroughCluster and BlackHoleCluster.
func FixedClusters(v *model.View) []*clusterv3.Cluster {
	sc := baseScope(v)
	return []*clusterv3.Cluster{
		sc.passthrough(PassthroughCluster),
		{
			Name:                 BlackHoleCluster,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
			ConnectTimeout:       sc.connectTimeout(),
		},
	}
}

// ClustersOf returns the outbound clusters of refs, for an update that
// regenerates the clusters of the hosts a change touches. A cluster
// depends on its ref (service, port, subset, DestinationRule), the
// snapshot (mesh config, service identities) and the proxy's locality
// only: scopes may share it (xds's clusterMemo).
func ClustersOf(v *model.View, refs []model.Cluster) []*clusterv3.Cluster {
	sc := baseScope(v)
	out := make([]*clusterv3.Cluster, 0, len(refs))
	for _, ref := range refs {
		out = append(out, sc.outboundCluster(ref))
	}
	return out
}

// InboundClusters returns the clusters that depend on the proxy's own
// workload: InboundPassthroughCluster (to ports that are no workload port,
// from the passthrough source its IP family has) and one inbound cluster
// per port it serves.
func InboundClusters(v *model.View) ([]*clusterv3.Cluster, error) {
	sc := baseScope(v)
	ipt := sc.passthrough(InboundPassthroughCluster)
	ipt.UpstreamBindConfig = sc.passthroughBind()
	out := []*clusterv3.Cluster{ipt}
	for _, ip := range sc.inbound() {
		out = append(out, sc.inboundCluster(ip))
	}
	return out, nil
}

// dnsRefresh sets a DNS cluster's resolution as Istio does: the answer's
// TTL, else the mesh's dnsRefreshRate (60 s by default), with 100 ms of
// jitter so the sidecars of a fleet do not resolve in step, by c-ares.
func (sc *scope) dnsRefresh(c *clusterv3.Cluster) {
	c.RespectDnsTtl = true
	c.DnsRefreshRate = durationpb.New(sc.v.Mesh().DNSRefreshRate)
	c.DnsJitter = durationpb.New(100 * time.Millisecond)
	c.TypedDnsResolverConfig = caresResolver()
}

// caresResolver is Istio's DNS resolver of DNS clusters: c-ares with at
// most 100 queries on one UDP socket, so that the source port changes
// often enough to make answers hard to spoof.
func caresResolver() *corev3.TypedExtensionConfig {
	return &corev3.TypedExtensionConfig{Name: "envoy.network.dns_resolver.cares", TypedConfig: mustAny(&caresv3.CaresDnsResolverConfig{
		UdpMaxQueries: wrapperspb.UInt32(100),
	})}
}

// connectTimeout is the mesh's cluster connect timeout (MeshConfig
// connectTimeout, 10 s by default), where a DestinationRule sets none.
func (sc *scope) connectTimeout() *durationpb.Duration {
	return durationpb.New(sc.v.Mesh().ConnectTimeout)
}

func (sc *scope) originalDst(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
		ConnectTimeout:       sc.connectTimeout(),
	}
}

// passthrough is PassthroughCluster or InboundPassthroughCluster as Istio
// builds them: the original destination, with no circuit breaking (every
// threshold at its maximum: Envoy's default of 1,024 connections or
// requests would cap all traffic to hosts no ServiceEntry names), and HTTP
// sent upstream in the version it arrived in, so an HTTP/2 or gRPC request
// the allow_any virtual host passes through stays HTTP/2; idle upstream
// connections close after 5 minutes.
func (sc *scope) passthrough(name string) *clusterv3.Cluster {
	c := sc.originalDst(name)
	c.CircuitBreakers = circuitBreakers(nil)
	applyKeepalive(c, sc.v.Mesh().TCPKeepalive)
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOpts: mustAny(&httpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{IdleTimeout: durationpb.New(5 * time.Minute)},
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
			HttpProtocolOptions:  &corev3.Http1ProtocolOptions{},
			Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
		}},
	})}
	return c
}

// usesEDS reports whether a service's endpoints go over EDS: every
// resolution but NONE, unless a DNS service has host names to resolve.
func usesEDS(svc *model.Service) bool {
	switch svc.Resolution {
	case model.ResolutionNone:
		return false
	case model.ResolutionDNS, model.ResolutionDNSRoundRobin:
		for _, e := range svc.Endpoints {
			if _, err := netip.ParseAddr(e.Address); err != nil {
				return false
			}
		}
	}
	return true
}

// isPassthrough reports whether the cluster forwards to the original
// destination: NONE resolution or a PASSTHROUGH load balancer.
func isPassthrough(ref model.Cluster, tp *networking.TrafficPolicy) bool {
	return ref.Service.Resolution == model.ResolutionNone || tp.GetLoadBalancer().GetSimple() == networking.LoadBalancerSettings_PASSTHROUGH
}

// outboundCluster builds one outbound cluster from the service and the
// DestinationRule's merged policy for its port and subset.
func (sc *scope) outboundCluster(ref model.Cluster) *clusterv3.Cluster {
	name := ref.Name()
	tp := ref.DestinationRule.TrafficPolicy(ref.Port.Number, ref.Subset)
	c := &clusterv3.Cluster{Name: name, ConnectTimeout: sc.connectTimeout()}
	switch {
	case isPassthrough(ref, tp):
		c = sc.originalDst(name)
	case usesEDS(ref.Service):
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
		c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: waitingADS(), ServiceName: name}
	case ref.Service.Resolution == model.ResolutionDNSRoundRobin:
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS}
		c.DnsLookupFamily = clusterv3.Cluster_V4_ONLY
		c.LoadAssignment = firstEndpoint(loadAssignment(ref))
		sc.dnsRefresh(c)
	default:
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
		c.DnsLookupFamily = clusterv3.Cluster_V4_ONLY
		c.LoadAssignment = loadAssignment(ref)
		sc.dnsRefresh(c)
	}
	if c.GetType() != clusterv3.Cluster_ORIGINAL_DST {
		applyLB(c, tp.GetLoadBalancer())
		if translate.Distributes(ref.LocalityLB) {
			c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{LocalityConfigSpecifier: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
				LocalityWeightedLbConfig: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
			}}
		}
	}
	upgrade := h2Upgrade(ref.Port.Protocol, tp.GetConnectionPool(), sc.v.Mesh().H2Upgrade)
	applyPool(c, ref.Port.Protocol, tp.GetConnectionPool(), upgrade, sc.v.Mesh().TCPKeepalive)
	applyRetryBudget(c, tp.GetRetryBudget())
	if od := tp.GetOutlierDetection(); od != nil {
		c.OutlierDetection = outlierDetection(od)
		if p := od.GetMinHealthPercent(); p > 0 {
			if c.CommonLbConfig == nil {
				c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
			}
			c.CommonLbConfig.HealthyPanicThreshold = &typev3.Percent{Value: float64(p)}
		}
	}
	h2 := isHTTP(ref.Port.Protocol) && (isHTTP2(ref.Port.Protocol) || upgrade)
	sc.applyTLS(c, ref, h2)
	applyProxyProtocol(c, tp.GetProxyProtocol())
	return c
}

// applyProxyProtocol makes the cluster open each upstream connection with
// a PROXY protocol header of the version asked (the client's address for
// the endpoint), as Istio does: the cluster's transport sockets (TLS,
// automatic mTLS's matches, else plaintext) are wrapped in Envoy's
// upstream PROXY protocol socket.
func applyProxyProtocol(c *clusterv3.Cluster, pp *networking.TrafficPolicy_ProxyProtocol) {
	if pp == nil {
		return
	}
	wrap := func(inner *corev3.TransportSocket) *corev3.TransportSocket {
		return &corev3.TransportSocket{Name: proxyProtocolTransport, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(&proxyprotocolv3.ProxyProtocolUpstreamTransport{
			Config:          &corev3.ProxyProtocolConfig{Version: corev3.ProxyProtocolConfig_Version(pp.GetVersion())},
			TransportSocket: inner,
		})}}
	}
	if c.TransportSocket == nil && len(c.TransportSocketMatches) == 0 {
		c.TransportSocket = wrap(&corev3.TransportSocket{Name: rawTransport, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(&rawbufferv3.RawBuffer{})}})
		return
	}
	if c.TransportSocket != nil {
		c.TransportSocket = wrap(c.TransportSocket)
	}
	for _, m := range c.TransportSocketMatches {
		m.TransportSocket = wrap(m.TransportSocket)
	}
}

// applyRetryBudget bounds the cluster's concurrent retries by a share of
// its active requests, as Istio maps a DestinationRule retryBudget: 20 %
// and at least 3 concurrent retries unless set.
func applyRetryBudget(c *clusterv3.Cluster, rb *networking.TrafficPolicy_RetryBudget) {
	if rb == nil {
		return
	}
	b := &clusterv3.CircuitBreakers_Thresholds_RetryBudget{
		BudgetPercent:       &typev3.Percent{Value: 20},
		BudgetInterval:      rb.GetBudgetInterval(),
		MinRetryConcurrency: wrapperspb.UInt32(3),
	}
	if p := rb.GetPercent(); p != nil {
		b.BudgetPercent = &typev3.Percent{Value: p.GetValue()}
	}
	if n := rb.GetMinRetryConcurrency(); n > 0 {
		b.MinRetryConcurrency = wrapperspb.UInt32(n)
	}
	c.CircuitBreakers.GetThresholds()[0].RetryBudget = b
}

// applyPool applies a DestinationRule connection pool (nil: none) to a
// cluster of a port with that protocol: its connect timeout, circuit
// breakers, TCP keepalive (the mesh's, field by field overridden by the
// pool's) and (HTTP ports) HTTP protocol options, HTTP/2 when upgrade.
func applyPool(c *clusterv3.Cluster, protocol string, cp *networking.ConnectionPoolSettings, upgrade bool, meshKeepalive *networking.ConnectionPoolSettings_TCPSettings_TcpKeepalive) {
	if d := cp.GetTcp().GetConnectTimeout(); d != nil && d.AsDuration() > 0 {
		c.ConnectTimeout = d
	}
	c.CircuitBreakers = circuitBreakers(cp)
	applyKeepalive(c, meshKeepalive)
	applyKeepalive(c, cp.GetTcp().GetTcpKeepalive())
	if isHTTP(protocol) {
		c.TypedExtensionProtocolOptions = httpOptions(protocol, cp, upgrade)
	}
}

// applyKeepalive sets a cluster's upstream TCP keepalive from Istio's
// settings (nil: unchanged), as Istio's setKeepAliveSettings: SO_KEEPALIVE
// with the system's values, then each field that is set.
func applyKeepalive(c *clusterv3.Cluster, ka *networking.ConnectionPoolSettings_TCPSettings_TcpKeepalive) {
	if ka == nil {
		return
	}
	if c.UpstreamConnectionOptions == nil {
		c.UpstreamConnectionOptions = &clusterv3.UpstreamConnectionOptions{TcpKeepalive: &corev3.TcpKeepalive{}}
	}
	k := c.UpstreamConnectionOptions.TcpKeepalive
	if ka.GetProbes() > 0 {
		k.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
	}
	if t := ka.GetTime(); t != nil {
		k.KeepaliveTime = wrapperspb.UInt32(uint32(t.AsDuration() / time.Second))
	}
	if t := ka.GetInterval(); t != nil {
		k.KeepaliveInterval = wrapperspb.UInt32(uint32(t.AsDuration() / time.Second))
	}
}

// h2Upgrade reports whether an outbound cluster speaks HTTP/2 to its
// endpoints beyond the ports that are HTTP/2 anyway, as Istio's
// shouldH2Upgrade: never with useClientProtocol; as the DestinationRule's
// h2UpgradePolicy says when it says; else for an HTTP port when the mesh's
// h2UpgradePolicy is UPGRADE.
func h2Upgrade(protocol string, cp *networking.ConnectionPoolSettings, mesh bool) bool {
	h := cp.GetHttp()
	if h.GetUseClientProtocol() {
		return false
	}
	switch h.GetH2UpgradePolicy() {
	case networking.ConnectionPoolSettings_HTTPSettings_UPGRADE:
		return true
	case networking.ConnectionPoolSettings_HTTPSettings_DO_NOT_UPGRADE:
		return false
	}
	return isHTTP(protocol) && mesh
}

// applyTLS sets the cluster's transport socket: the DestinationRule's TLS
// mode, else (auto mTLS) mesh mTLS toward endpoints labelled
// security.istio.io/tlsMode=istio and plaintext toward the rest, for
// mesh-internal services, unless the mesh turns automatic mTLS off. Mesh
// mTLS of an HTTP/2 cluster (h2) also offers ALPN h2, as Istio's does: a
// proxyless gRPC server accepts only connections that negotiate it.
func (sc *scope) applyTLS(c *clusterv3.Cluster, ref model.Cluster, h2 bool) {
	sni := SNI(ref.Port.Number, ref.Subset, ref.Service.Hostname)
	sans := sc.v.ServiceIdentities(ref.Service)
	if t := ref.DestinationRule.ClientTLS(ref.Port.Number, ref.Subset); t != nil {
		c.TransportSocket = clientTLS(t, sni, sans, h2)
		autoSNI(c, t)
		return
	}
	if ref.Service.MeshExternal || c.GetType() == clusterv3.Cluster_ORIGINAL_DST || sc.v.Mesh().DisableAutoMTLS {
		return
	}
	c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{
		{
			Name:            "tlsMode-istio",
			Match:           &structpb.Struct{Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(meshlabels.TLSModeIstio)}},
			TransportSocket: istioMutual(sni, sans, h2),
		},
		{
			Name:            "tlsMode-disabled",
			Match:           &structpb.Struct{},
			TransportSocket: &corev3.TransportSocket{Name: rawTransport, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(&rawbufferv3.RawBuffer{})}},
		},
	}
}

// applyLB maps Istio's load balancer. Unset is LEAST_REQUEST, Istio's
// default; consistentHash is RING_HASH (MAGLEV when asked for) with the
// hash policy on the routes.
func applyLB(c *clusterv3.Cluster, lb *networking.LoadBalancerSettings) {
	c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	if ch := lb.GetConsistentHash(); ch != nil {
		if m := ch.GetMaglev(); m != nil {
			c.LbPolicy = clusterv3.Cluster_MAGLEV
			if m.GetTableSize() > 0 {
				c.LbConfig = &clusterv3.Cluster_MaglevLbConfig_{MaglevLbConfig: &clusterv3.Cluster_MaglevLbConfig{TableSize: wrapperspb.UInt64(m.GetTableSize())}}
			}
			return
		}
		c.LbPolicy = clusterv3.Cluster_RING_HASH
		rh := &clusterv3.Cluster_RingHashLbConfig{HashFunction: clusterv3.Cluster_RingHashLbConfig_XX_HASH}
		n := ch.GetRingHash().GetMinimumRingSize()
		if n == 0 {
			n = ch.GetMinimumRingSize()
		}
		if n > 0 {
			rh.MinimumRingSize = wrapperspb.UInt64(n)
		}
		c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: rh}
		return
	}
	switch lb.GetSimple() {
	case networking.LoadBalancerSettings_ROUND_ROBIN:
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
		if ss := slowStart(lb); ss != nil {
			c.LbConfig = &clusterv3.Cluster_RoundRobinLbConfig_{RoundRobinLbConfig: &clusterv3.Cluster_RoundRobinLbConfig{SlowStartConfig: ss}}
		}
		return
	case networking.LoadBalancerSettings_RANDOM:
		c.LbPolicy = clusterv3.Cluster_RANDOM
		return
	}
	if ss := slowStart(lb); ss != nil && c.LbPolicy == clusterv3.Cluster_LEAST_REQUEST {
		c.LbConfig = &clusterv3.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &clusterv3.Cluster_LeastRequestLbConfig{SlowStartConfig: ss}}
	}
}

// slowStart maps a load balancer's warmup as Istio does, for ROUND_ROBIN
// and LEAST_REQUEST: a new endpoint's share ramps up over the duration,
// linearly (aggression 1) from 10 % of its weight unless set; the
// deprecated warmupDurationSecs gives the window alone. nil: none.
func slowStart(lb *networking.LoadBalancerSettings) *clusterv3.Cluster_SlowStartConfig {
	if w := lb.GetWarmup(); w != nil {
		aggression, minPercent := 1.0, 10.0
		if a := w.GetAggression(); a != nil {
			aggression = a.GetValue()
		}
		if m := w.GetMinimumPercent(); m != nil {
			minPercent = m.GetValue()
		}
		return &clusterv3.Cluster_SlowStartConfig{
			SlowStartWindow:  w.GetDuration(),
			Aggression:       &corev3.RuntimeDouble{DefaultValue: aggression, RuntimeKey: "("},
			MinWeightPercent: &typev3.Percent{Value: minPercent},
		}
	}
	if d := lb.GetWarmupDurationSecs(); d != nil {
		return &clusterv3.Cluster_SlowStartConfig{SlowStartWindow: d}
	}
	return nil
}

// circuitBreakers maps the connection pool; unset limits are Istio's
// "unlimited" (max uint32), not Envoy's small defaults.
func circuitBreakers(cp *networking.ConnectionPoolSettings) *clusterv3.CircuitBreakers {
	lim := func(n int32) *wrapperspb.UInt32Value {
		if n > 0 {
			return wrapperspb.UInt32(uint32(n))
		}
		return wrapperspb.UInt32(math.MaxUint32)
	}
	return &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		Priority:           corev3.RoutingPriority_DEFAULT,
		MaxConnections:     lim(cp.GetTcp().GetMaxConnections()),
		MaxPendingRequests: lim(cp.GetHttp().GetHttp1MaxPendingRequests()),
		MaxRequests:        lim(cp.GetHttp().GetHttp2MaxRequests()),
		MaxRetries:         lim(cp.GetHttp().GetMaxRetries()),
		TrackRemaining:     true,
	}}}
}

// autoSNI: SIMPLE or MUTUAL TLS naming no SNI sends the request's host as
// SNI and checks the server certificate against it (unless the rule names
// its subjectAltNames), as Istio sets it; otherwise the server would be
// checked against the roots only, any certificate they signed accepted.
func autoSNI(c *clusterv3.Cluster, t *networking.ClientTLSSettings) {
	if t.GetSni() != "" || (t.GetMode() != networking.ClientTLSSettings_SIMPLE && t.GetMode() != networking.ClientTLSSettings_MUTUAL) {
		return
	}
	opts := &httpv3.HttpProtocolOptions{}
	if a := c.GetTypedExtensionProtocolOptions()[httpProtocolOpts]; a != nil {
		_ = a.UnmarshalTo(opts)
	} else {
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
		}}
	}
	opts.UpstreamHttpProtocolOptions = &corev3.UpstreamHttpProtocolOptions{AutoSni: true, AutoSanValidation: len(t.GetSubjectAltNames()) == 0}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOpts: mustAny(opts)}
}

// httpOptions sets the upstream HTTP version (HTTP/2 for gRPC and HTTP2
// ports or when upgrade, h2Upgrade's answer; the client's own with
// useClientProtocol) and, from the connection pool as Istio maps it, the
// idle timeout (http's, else tcp's), requests per connection, connection
// lifetime (tcp maxConnectionDuration), and for HTTP/2 the concurrent
// streams and keepalive pings (http2KeepAlive); nil for HTTP/1.1 with none
// of those (Envoy's default upstream protocol).
func httpOptions(protocol string, cp *networking.ConnectionPoolSettings, upgrade bool) map[string]*anypb.Any {
	h := cp.GetHttp()
	opts := &httpv3.HttpProtocolOptions{}
	idle := h.GetIdleTimeout()
	if idle == nil {
		idle = cp.GetTcp().GetIdleTimeout()
	}
	if idle != nil || h.GetMaxRequestsPerConnection() > 0 || cp.GetTcp().GetMaxConnectionDuration() != nil {
		opts.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{IdleTimeout: idle, MaxConnectionDuration: cp.GetTcp().GetMaxConnectionDuration()}
		if n := h.GetMaxRequestsPerConnection(); n > 0 {
			opts.CommonHttpProtocolOptions.MaxRequestsPerConnection = wrapperspb.UInt32(uint32(n))
		}
	}
	h2 := &corev3.Http2ProtocolOptions{}
	if n := h.GetMaxConcurrentStreams(); n > 0 {
		h2.MaxConcurrentStreams = wrapperspb.UInt32(uint32(n))
	}
	if ka := h.GetHttp2KeepAlive(); ka != nil {
		h2.ConnectionKeepalive = &corev3.KeepaliveSettings{Interval: ka.GetInterval(), Timeout: ka.GetTimeout()}
	}
	switch {
	case h.GetUseClientProtocol():
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
			HttpProtocolOptions:  &corev3.Http1ProtocolOptions{},
			Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
		}}
	case isHTTP2(protocol) || upgrade:
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: h2},
		}}
	default:
		if opts.CommonHttpProtocolOptions == nil {
			return nil // HTTP/1.1 with Envoy's defaults: nothing to say, as Istio says nothing
		}
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
		}}
	}
	return map[string]*anypb.Any{httpProtocolOpts: mustAny(opts)}
}

// outlierDetection maps Istio's settings as Istio 1.31 does: success-rate
// ejection off; consecutive 5xx and gateway errors as set (enforced when
// above 0), Envoy's defaults when not set (5 consecutive 5xx, enforced; no
// gateway-error ejection); local-origin errors only when split.
func outlierDetection(od *networking.OutlierDetection) *clusterv3.OutlierDetection {
	out := &clusterv3.OutlierDetection{
		Interval:             od.GetInterval(),
		BaseEjectionTime:     od.GetBaseEjectionTime(),
		EnforcingSuccessRate: wrapperspb.UInt32(0),
	}
	enforce := func(n uint32) *wrapperspb.UInt32Value {
		if n > 0 {
			return wrapperspb.UInt32(100)
		}
		return wrapperspb.UInt32(0)
	}
	if v := od.GetConsecutive_5XxErrors(); v != nil {
		out.Consecutive_5Xx, out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(v.GetValue()), enforce(v.GetValue())
	}
	if v := od.GetConsecutiveGatewayErrors(); v != nil {
		out.ConsecutiveGatewayFailure, out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(v.GetValue()), enforce(v.GetValue())
	}
	if od.GetSplitExternalLocalOriginErrors() {
		out.SplitExternalLocalOriginErrors = true
		if v := od.GetConsecutiveLocalOriginFailures(); v.GetValue() > 0 {
			out.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(v.GetValue())
			out.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(100)
		}
		out.EnforcingLocalOriginSuccessRate = wrapperspb.UInt32(0)
	}
	if n := od.GetMaxEjectionPercent(); n > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(min(n, 100)))
	}
	return out
}

// firstEndpoint keeps a load assignment's first endpoint only: a
// LOGICAL_DNS cluster has exactly one (Envoy refuses more), resolved anew
// for each connection.
func firstEndpoint(cla *endpointv3.ClusterLoadAssignment) *endpointv3.ClusterLoadAssignment {
	if len(cla.Endpoints) == 0 {
		return cla
	}
	lle := cla.Endpoints[0]
	lle.LbEndpoints = lle.LbEndpoints[:1]
	lle.LoadBalancingWeight = lle.LbEndpoints[0].GetLoadBalancingWeight()
	cla.Endpoints = cla.Endpoints[:1]
	return cla
}

// inboundCluster forwards to the workload itself.
func (sc *scope) inboundCluster(ip inboundPort) *clusterv3.Cluster {
	name := InboundClusterName(ip.port)
	var c *clusterv3.Cluster
	if ip.host == "" {
		// The address the connection was sent to; Envoy never drops the
		// hosts it learns (Istio's maximal cleanup interval).
		c = sc.originalDst(name)
		c.CleanupInterval = durationpb.New(maxCleanupInterval)
	} else {
		c = &clusterv3.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
			ConnectTimeout:       sc.connectTimeout(),
			LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
			LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: address(ip.host, ip.hostPort),
				}}}},
			}}},
		}
	}
	applyPool(c, ip.protocol, ip.pool, false, sc.v.Mesh().TCPKeepalive) // Istio upgrades outbound clusters only
	if ip.host != "127.0.0.1" && ip.host != "::1" && !strings.HasPrefix(ip.host, "unix://") {
		// To the VM's own address: from the source the capture lets
		// through. (Istio binds a unix socket's cluster too; no capture
		// sees a unix socket, and an IP source cannot be bound to one.)
		c.UpstreamBindConfig = sc.passthroughBind()
	}
	return c
}

// maxCleanupInterval is the largest duration protobuf's Duration holds
// in whole seconds, Istio's cleanup interval of inbound ORIGINAL_DST
// clusters (in effect: never).
const maxCleanupInterval = 9223372035 * time.Second

// passthroughBind binds a cluster's upstream connections to
// passthroughSources: the first, and the others as extra source addresses
// (Envoy picks the one of the upstream's family).
func (sc *scope) passthroughBind() *corev3.BindConfig {
	srcs := sc.passthroughSources()
	addr := func(a string) *corev3.SocketAddress {
		return &corev3.SocketAddress{Address: a, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 0}}
	}
	b := &corev3.BindConfig{SourceAddress: addr(srcs[0])}
	for _, a := range srcs[1:] {
		b.ExtraSourceAddresses = append(b.ExtraSourceAddresses, &corev3.ExtraSourceAddress{Address: addr(a)})
	}
	return b
}

// lbEndpoint is one endpoint; a unix:// address becomes a pipe.
func lbEndpoint(e *model.Endpoint, port uint32) *endpointv3.LbEndpoint {
	lb := &endpointv3.LbEndpoint{
		HostIdentifier:      &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: address(e.Address, port)}},
		HealthStatus:        corev3.HealthStatus_HEALTHY,
		LoadBalancingWeight: wrapperspb.UInt32(e.EffectiveWeight()),
	}
	if strings.EqualFold(e.Labels[meshlabels.TLSModeLabel], meshlabels.TLSModeIstio) {
		lb.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			transportMatchNS: {Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(meshlabels.TLSModeIstio)}},
		}}
	}
	return lb
}
