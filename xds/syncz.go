package xds

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/encoding/protojson"
)

// streams tracks connected proxies and their per-type sync state for
// /debug/syncz, and counts NACKs.
type streams struct {
	logger  *slog.Logger
	metrics *metrics
	cache   *arms

	observer Observer // may be nil
	// nacked, when set, learns of every NACK: proxy, type, version, error.
	nacked func(proxy, typ, version, msg string)

	mu   sync.Mutex
	byID map[streamID]*streamState
	ctxs map[streamID]context.Context // stream contexts, for the observer
}

type streamID struct {
	delta bool
	id    int64
}

type streamState struct {
	proxy     *Proxy
	connected time.Time
	types     map[string]*TypeStatus
	// nonces maps a response nonce to its version, until answered.
	nonces map[string]string
	// warming maps the nonce of an RDS response to the route
	// configurations the stream holds in their warming form once it is
	// applied (TypeStatus.Warming), until answered.
	warming map[string][]string
}

// TypeStatus is the sync state of one resource type on one stream.
type TypeStatus struct {
	// Sent is the version_info of the last response sent.
	Sent string `json:"sent,omitempty"`
	// Acked is the last version the proxy accepted.
	Acked string `json:"acked,omitempty"`
	// Nack is the error of the last rejected response, cleared by an ACK.
	Nack string `json:"nack,omitempty"`
	// NackVersion is the version that was rejected.
	NackVersion string `json:"nackVersion,omitempty"`
	// Resources is how many resources the last response carried.
	Resources int `json:"resources"`
	// Warming, for the RDS of a proxyless gRPC client, names the route
	// configurations it ACKed in their make-before-break form: the routes
	// it had, plus a route no RPC matches that names the clusters of the
	// new routes. The new routes follow once it holds those clusters.
	Warming []string `json:"warming,omitempty"`
}

// SyncStatus is one connected proxy in /debug/syncz.
type SyncStatus struct {
	ID        string    `json:"id"`
	Kind      ProxyKind `json:"kind"`
	Namespace string    `json:"namespace"`
	Labels    string    `json:"labels,omitempty"`
	// ServiceAccount is what the node's SERVICE_ACCOUNT says.
	ServiceAccount string `json:"serviceAccount,omitempty"`
	Group          string `json:"group"`
	// Identity, for an MCP client (kind "mcp"), is who it was let in as:
	// its mesh certificate's SPIFFE ID, or how a plaintext client was.
	Identity  string                 `json:"identity,omitempty"`
	Protocol  string                 `json:"protocol"` // "sotw" or "delta"
	Connected time.Time              `json:"connected"`
	Types     map[string]*TypeStatus `json:"types"`
}

func newStreams(logger *slog.Logger, m *metrics, c *arms, obs Observer) *streams {
	return &streams{logger: logger, metrics: m, cache: c, observer: obs, byID: map[streamID]*streamState{}, ctxs: map[streamID]context.Context{}}
}

func (s *streams) callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, id int64, _ string) error {
			s.opened(streamID{id: id}, ctx)
			return nil
		},
		DeltaStreamOpenFunc: func(ctx context.Context, id int64, _ string) error {
			s.opened(streamID{delta: true, id: id}, ctx)
			return nil
		},
		StreamClosedFunc: func(id int64, _ *corev3.Node) { s.closed(streamID{id: id}) },
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) {
			if s.cache != nil {
				s.cache.deltaStreamClosed(id)
			}
			s.closed(streamID{delta: true, id: id})
		},
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			return s.observe(streamID{id: id}, req.GetTypeUrl(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil, req.GetResourceNames(),
				s.request(streamID{id: id}, req.GetNode(), req.GetTypeUrl(), req.GetVersionInfo(), req.GetResponseNonce(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil))
		},
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			if s.cache != nil {
				s.cache.deltaRequest(id, req)
			}
			return s.observe(streamID{delta: true, id: id}, req.GetTypeUrl(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil, req.GetResourceNamesSubscribe(),
				s.request(streamID{delta: true, id: id}, req.GetNode(), req.GetTypeUrl(), "", req.GetResponseNonce(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil))
		},
		StreamResponseFunc: func(ctx context.Context, id int64, req *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			s.response(streamID{id: id}, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce(), len(resp.GetResources()), routeStagingFrom(ctx))
		},
		StreamDeltaResponseFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			s.response(streamID{delta: true, id: id}, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce(), len(resp.GetResources()), nil)
		},
	}
}

func (s *streams) opened(id streamID, ctx context.Context) {
	if s.observer == nil {
		return
	}
	s.mu.Lock()
	s.ctxs[id] = ctx
	s.mu.Unlock()
}

func (s *streams) closed(id streamID) {
	s.mu.Lock()
	st := s.byID[id]
	delete(s.byID, id)
	delete(s.ctxs, id)
	s.mu.Unlock()
	if st != nil {
		s.metrics.connected.WithLabelValues(string(st.proxy.Kind)).Dec()
		s.logger.Info("proxy disconnected", "proxy", st.proxy.ID, "kind", st.proxy.Kind)
		if s.observer != nil {
			s.observer.StreamClosed(id.key(), st.proxy)
		}
	}
}

// observe tells the observer, outside the lock, about a new stream and
// about health and credential reports. opened is the stream's proxy when
// this request opened it. The error is the observer's refusal of the
// stream.
func (s *streams) observe(id streamID, typeURL, errMsg string, hasErr bool, names []string, opened *Proxy) error {
	if s.observer == nil {
		return nil
	}
	if opened != nil {
		s.mu.Lock()
		ctx := s.ctxs[id]
		s.mu.Unlock()
		if ctx == nil {
			ctx = context.Background()
		}
		if err := s.observer.StreamOpened(ctx, id.key(), opened); err != nil {
			return err
		}
	}
	if typeURL != HealthInfoType && typeURL != CredentialsType {
		return nil
	}
	s.mu.Lock()
	st := s.byID[id]
	s.mu.Unlock()
	switch {
	case st == nil:
	case typeURL == HealthInfoType:
		s.observer.Health(id.key(), st.proxy, !hasErr, errMsg)
	default:
		s.observer.Credentials(id.key(), st.proxy, names)
	}
	return nil
}

// request records a request for /debug/syncz; it returns the stream's proxy
// when the request opened the stream.
func (s *streams) request(id streamID, node *corev3.Node, typeURL, version, nonce, errMsg string, nack bool) (opened *Proxy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.byID[id]
	if st == nil {
		p, err := ProxyFromNode(node)
		if err != nil {
			return nil // the cache rejects the watch and closes the stream
		}
		st = &streamState{proxy: p, connected: time.Now(), types: map[string]*TypeStatus{}, nonces: map[string]string{}, warming: map[string][]string{}}
		s.byID[id] = st
		s.metrics.connected.WithLabelValues(string(p.Kind)).Inc()
		s.logger.Info("proxy connected", "proxy", p.ID, "kind", p.Kind, "namespace", p.Namespace, "delta", id.delta)
		opened = p
	}
	if typeURL == HealthInfoType || typeURL == CredentialsType {
		return opened // a report, not a subscription
	}
	ts := st.types[shortType(typeURL)]
	if ts == nil {
		ts = &TypeStatus{}
		st.types[shortType(typeURL)] = ts
	}
	if nonce == "" {
		return // a subscription, not an answer to a response
	}
	// The nonce names the response answered: its version is the one ACKed
	// or rejected (a SotW NACK's version_info is the last accepted one).
	sent, ok := st.nonces[nonce]
	if !ok {
		sent = version
	}
	warming, staged := st.warming[nonce]
	delete(st.nonces, nonce)
	delete(st.warming, nonce)
	if nack {
		// One log line per new rejection: a proxy repeating the same NACK
		// (a storm of them) is counted in the metric and shown in syncz,
		// not logged again.
		if ts.Nack != errMsg {
			s.logger.Warn("proxy rejected config (NACK)", "proxy", st.proxy.ID, "type", shortType(typeURL), "version", sent, "error", errMsg)
		}
		ts.Nack, ts.NackVersion = errMsg, sent
		s.metrics.nacks.WithLabelValues(shortType(typeURL)).Inc()
		if s.nacked != nil {
			s.nacked(st.proxy.ID, shortType(typeURL), sent, errMsg)
		}
		return
	}
	if sent != "" {
		ts.Acked, ts.Nack, ts.NackVersion = sent, "", ""
	}
	if staged {
		ts.Warming = warming
	}
	return opened
}

func (s *streams) response(id streamID, typeURL, version, nonce string, n int, staging *routeStaging) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.byID[id]
	if st == nil {
		return
	}
	ts := st.types[shortType(typeURL)]
	if ts == nil {
		ts = &TypeStatus{}
		st.types[shortType(typeURL)] = ts
	}
	ts.Sent, ts.Resources = version, n
	// Unanswered nonces of older responses are superseded: keep the map small.
	for k, v := range st.nonces {
		if v == "" || len(st.nonces) > 16 {
			delete(st.nonces, k)
			delete(st.warming, k)
		}
	}
	st.nonces[nonce] = version
	if staging != nil {
		st.warming[nonce] = staging.warming
	}
}

// Syncz returns the sync state of every connected proxy, sorted by id.
func (s *Server) Syncz() []SyncStatus {
	s.streams.mu.Lock()
	var out []SyncStatus
	var proxies []*Proxy
	for id, st := range s.streams.byID {
		ss := SyncStatus{
			ID: st.proxy.ID, Kind: st.proxy.Kind, Namespace: st.proxy.Namespace, Labels: model.LabelString(st.proxy.Labels), ServiceAccount: st.proxy.ServiceAccount,
			Protocol: "sotw", Connected: st.connected, Types: map[string]*TypeStatus{},
		}
		if id.delta {
			ss.Protocol = "delta"
		}
		for t, ts := range st.types {
			c := *ts
			ss.Types[t] = &c
		}
		out = append(out, ss)
		proxies = append(proxies, st.proxy)
	}
	s.streams.mu.Unlock()
	// The stream's own proxy: all that decides its group (an Envoy's IPs,
	// workload and locality too), without a search per proxy.
	for i := range out {
		out[i].Group = s.arms.armOfProxy(proxies[i].ID).groupKey(proxies[i])
	}
	out = append(out, s.mcpSyncz()...)
	slices.SortFunc(out, func(a, b SyncStatus) int { return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Protocol, b.Protocol)) })
	return out
}

// proxy returns a connected proxy by id, or nil.
func (s *Server) proxy(id string) *Proxy {
	s.streams.mu.Lock()
	defer s.streams.mu.Unlock()
	for _, st := range s.streams.byID {
		if st.proxy.ID == id {
			return st.proxy
		}
	}
	return nil
}

// SynczHandler serves /debug/syncz: JSON, one entry per connected proxy
// with its kind, group and, per resource type, the version sent, the version
// ACKed and the last NACK.
func (s *Server) SynczHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		out := s.Syncz()
		if out == nil {
			out = []SyncStatus{}
		}
		_ = enc.Encode(out)
	})
}

// ConfigDump is /debug/config_dump?proxy=ID: what the proxy's streams
// hold. Resources merges them (a proxy's agent and application may share
// one node id); Streams has each stream's resources with their versions.
type ConfigDump struct {
	Proxy *Proxy `json:"proxy"`
	// Group and Version are the proxy's group and its current generation.
	Group   string `json:"group"`
	Version string `json:"version"`
	// Resources holds, by short type name and resource name, the resource
	// as Envoy's JSON.
	Resources map[string]map[string]json.RawMessage `json:"resources"`
	Streams   []DumpStream                          `json:"streams"`
}

// DumpStream is one stream in a ConfigDump.
type DumpStream struct {
	Protocol string `json:"protocol"`
	Group    string `json:"group"`
	// Versions holds, by short type name, each held resource's version.
	Versions map[string]map[string]string `json:"versions"`
	// Missing names the resources whose held version vmesh no longer
	// keeps (the proxy rejected the newer one it was sent).
	Missing []string `json:"missing,omitempty"`
}

// ConfigDumpHandler serves /debug/config_dump?proxy=ID: the resources the
// proxy's streams hold, as JSON, by type and resource name (see ConfigDump).
func (s *Server) ConfigDumpHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("proxy")
		p := s.proxy(id)
		if p == nil {
			http.Error(w, "no connected proxy with id "+id, http.StatusNotFound)
			return
		}
		out := ConfigDump{Proxy: p, Resources: map[string]map[string]json.RawMessage{}, Streams: []DumpStream{}}
		if g := s.arms.armOfProxy(p.ID).generationFor(p); g != nil {
			out.Group, out.Version = g.Key, g.Version
		}
		for _, hs := range append(s.cache.held(id), s.cand.held(id)...) {
			ds := DumpStream{Protocol: hs.Protocol, Group: hs.Group, Versions: map[string]map[string]string{}}
			for t, rs := range hs.Types {
				ds.Versions[t] = map[string]string{}
				for _, hr := range rs {
					ds.Versions[t][hr.Name] = hr.Version
					if hr.Body == nil {
						if hr.Version != "" {
							ds.Missing = append(ds.Missing, t+"/"+hr.Name)
						}
						continue
					}
					if out.Resources[t] == nil {
						out.Resources[t] = map[string]json.RawMessage{}
					}
					if _, ok := out.Resources[t][hr.Name]; ok {
						continue
					}
					b, err := protojson.Marshal(hr.Body)
					if err != nil {
						b, _ = json.Marshal(err.Error())
					}
					out.Resources[t][hr.Name] = b
				}
			}
			slices.Sort(ds.Missing)
			out.Streams = append(out.Streams, ds)
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	})
}

// Agent reports whether the stream is a VM agent's own: it subscribes to
// the agent's types (the name table, WorkloadGroups) and to none of an
// application's. A VM's agent and its applications share a node id.
func (s SyncStatus) Agent() bool {
	agent := false
	for t := range s.Types {
		if u := strings.ToUpper(t); u != strings.ToUpper(shortType(NameTableType)) && u != strings.ToUpper(shortType(WorkloadGroupType)) {
			return false
		}
		agent = true
	}
	return agent
}
