// Package mcpsource is the config source that reads Istio config over xDS
// (MCP over xDS) from a server named by MeshConfig configSources
// (`address: xds://HOST:PORT`), as istiod does: Istio's own DiscoveryServer
// with its "api" generator, another istiod, or any server speaking Istio's
// config type URLs (internal/mcptypes). It writes the Store beside the
// directory and git sources.
//
// Each resource is decoded into the same objects as a file and validated
// on the same path (filestore.DecodeFile); its provenance is the server's
// address (the source name, "mcp:xds://HOST:PORT"), the type URL and
// resource name (Origin.File) and the resource's version (Origin.Version).
// A resource that does not decode or validate is NACKed with its name and
// the reason, and its last good version keeps serving, as a file's does; a
// lost connection keeps every object until the server answers again. SotW
// and delta ADS are both spoken; SotW is the default, as istiod's client.
package mcpsource

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/mcptypes"
	"github.com/vmesh/vmesh/internal/retry"
	"github.com/vmesh/vmesh/store"
)

// Config is one MCP source's settings.
type Config struct {
	// Address is the configSources address, xds://HOST:PORT.
	Address string
	// Credentials are the transport credentials (TLSSettings builds them
	// from Istio's ClientTLSSettings); nil is plaintext.
	Credentials credentials.TransportCredentials
	// Delta uses delta ADS instead of SotW.
	Delta bool
	// NodeID is the node id sent to the server; default a sidecar-form id
	// (Istio's server parses only those): sidecar~127.0.0.1~vmesh.NS~NS.svc.cluster.local.
	NodeID string
	// Namespace is the node's NAMESPACE (the mesh's root namespace, where
	// istiod runs); default istio-system.
	Namespace string
	// Types are the config types subscribed to; default every
	// mcptypes.Types().
	Types []mcptypes.Type
	// Limits bound what one resource may decode to.
	Limits filestore.Limits
	// SyncWait is how long Ready waits for the first response of every
	// type before it closes anyway (a warning says so); default 10 s.
	SyncWait time.Duration
	// MinBackoff and MaxBackoff bound the reconnect delays; default 100 ms
	// and 10 s.
	MinBackoff, MaxBackoff time.Duration
}

// Host returns the HOST:PORT of an xds:// address.
func Host(address string) (string, error) {
	u, err := url.Parse(address)
	if err != nil {
		return "", fmt.Errorf("config source %q: %w", address, err)
	}
	if u.Scheme != "xds" {
		return "", fmt.Errorf("config source %q: not an xds://HOST:PORT address", address)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("config source %q: want xds://HOST:PORT", address)
	}
	return u.Host, nil
}

// Source reads one MCP server into the Store.
type Source struct {
	cfg   Config
	host  string
	src   store.Source
	store *store.Store
	log   *slog.Logger
	types map[string]mcptypes.Type
	ready chan struct{}

	mu sync.Mutex
	// state per type URL: the accepted objects and the rejected resources.
	state map[string]*typeState
	// synced are the types whose first response was applied.
	synced map[string]bool
	// connErr is why the source is not connected, "" when it is.
	connErr   string
	version   string // the last version applied
	readyOnce sync.Once
	stats     Stats
}

// Stats counts what the source did, for tests and /debug.
type Stats struct {
	Responses, ACKs, NACKs, Connects int
}

type typeState struct {
	// objects are the accepted objects by resource name.
	objects map[string]*store.Object
	// versions are the resources' versions by name (delta's
	// initial_resource_versions on reconnect).
	versions map[string]string
	// bad are the rejected resources' problems by resource name.
	bad map[string][]store.ConfigError
	// warnings are the accepted resources' warnings by name.
	warnings map[string][]store.ConfigError
	// accepted is the version of the last response accepted whole: a
	// NACK and a new SotW stream name it.
	accepted string
}

// New returns a source for cfg writing st.
func New(cfg Config, st *store.Store, logger *slog.Logger) (*Source, error) {
	host, err := Host(cfg.Address)
	if err != nil {
		return nil, err
	}
	cfg.Namespace = cmp.Or(cfg.Namespace, "istio-system")
	cfg.NodeID = cmp.Or(cfg.NodeID, fmt.Sprintf("sidecar~127.0.0.1~vmesh.%s~%s.svc.cluster.local", cfg.Namespace, cfg.Namespace))
	if len(cfg.Types) == 0 {
		cfg.Types = mcptypes.Types()
	}
	cfg.SyncWait = cmp.Or(cfg.SyncWait, 10*time.Second)
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, 100*time.Millisecond)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 10*time.Second)
	if logger == nil {
		logger = slog.Default()
	}
	s := &Source{
		cfg: cfg, host: host, store: st,
		src:   store.Source{Name: SourceName(cfg.Address), Class: store.ClassConfig},
		log:   logger.With("source", SourceName(cfg.Address)),
		types: map[string]mcptypes.Type{}, ready: make(chan struct{}),
		state: map[string]*typeState{}, synced: map[string]bool{},
	}
	for _, t := range cfg.Types {
		s.types[t.URL()] = t
		s.state[t.URL()] = &typeState{objects: map[string]*store.Object{}, versions: map[string]string{}, bad: map[string][]store.ConfigError{}, warnings: map[string][]store.ConfigError{}}
	}
	return s, nil
}

// SourceName is the Store source name of an MCP address: mcp:xds://HOST:PORT.
func SourceName(address string) string { return "mcp:" + address }

// Name returns the source's name in the Store.
func (s *Source) Name() string { return s.src.Name }

// Ready is closed once every subscribed type's first response is in the
// Store, or Config.SyncWait after Run started.
func (s *Source) Ready() <-chan struct{} { return s.ready }

// Stats returns the source's counters.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Run connects to the server and follows it until ctx ends, reconnecting
// with backoff; a lost connection keeps the last objects in the Store.
func (s *Source) Run(ctx context.Context) error {
	creds := s.cfg.Credentials
	if creds == nil {
		creds = insecureCreds()
	}
	cc, err := grpc.NewClient(s.host, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("%s: %w", s.src.Name, err)
	}
	defer cc.Close()
	go func() {
		t := time.NewTimer(s.cfg.SyncWait)
		defer t.Stop()
		select {
		case <-t.C:
			s.mu.Lock()
			var late []string
			for u := range s.types {
				if !s.synced[u] {
					late = append(late, u)
				}
			}
			s.mu.Unlock()
			if len(late) > 0 {
				slices.Sort(late)
				s.log.Warn("serving without the first response of some config types", "types", late, "waited", s.cfg.SyncWait)
			}
			s.readyOnce.Do(func() { close(s.ready) })
		case <-s.ready:
		case <-ctx.Done():
		}
	}()
	s.mu.Lock()
	s.publishStatusLocked() // connecting
	s.mu.Unlock()
	client := discovery.NewAggregatedDiscoveryServiceClient(cc)
	b := retry.New(s.cfg.MinBackoff, s.cfg.MaxBackoff)
	for {
		var err error
		var got bool
		if s.cfg.Delta {
			got, err = s.runDelta(ctx, client)
		} else {
			got, err = s.runSotW(ctx, client)
		}
		if ctx.Err() != nil {
			return nil
		}
		if got {
			b.Reset()
		}
		s.setConnErr(fmt.Sprintf("disconnected: %v", err))
		s.log.Warn("MCP server stream ended; keeping the last config", "error", err)
		if !b.Wait(ctx) {
			return nil
		}
	}
}

func (s *Source) node() *core.Node {
	md, _ := structpb.NewStruct(map[string]any{ // static shapes
		mcptypes.GeneratorMetadataKey: mcptypes.GeneratorAPI,
		"NAMESPACE":                   s.cfg.Namespace,
	})
	return &core.Node{Id: s.cfg.NodeID, Metadata: md}
}

func (s *Source) typeURLs() []string { return slices.Sorted(maps.Keys(s.types)) }

// runSotW runs one SotW stream; got says a response arrived.
func (s *Source) runSotW(ctx context.Context, client discovery.AggregatedDiscoveryServiceClient) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	for i, u := range s.typeURLs() {
		req := &discovery.DiscoveryRequest{TypeUrl: u, VersionInfo: s.accepted(u)}
		if i == 0 {
			req.Node = s.node()
		}
		if err := stream.Send(req); err != nil {
			return false, err
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return got, err
		}
		if !got {
			got = true
			s.count(func(st *Stats) { st.Connects++ })
			s.setConnErr("")
		}
		nack := s.applySotW(resp)
		req := &discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(), VersionInfo: s.accepted(resp.GetTypeUrl())}
		if nack != "" {
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: nack}
		}
		if err := stream.Send(req); err != nil {
			return got, err
		}
	}
}

// runDelta runs one delta stream; got says a response arrived.
func (s *Source) runDelta(ctx context.Context, client discovery.AggregatedDiscoveryServiceClient) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.DeltaAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	for i, u := range s.typeURLs() {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: u, InitialResourceVersions: s.versions(u)}
		if i == 0 {
			req.Node = s.node()
		}
		if err := stream.Send(req); err != nil {
			return false, err
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return got, err
		}
		if !got {
			got = true
			s.count(func(st *Stats) { st.Connects++ })
			s.setConnErr("")
		}
		nack := s.applyDelta(resp)
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
		if nack != "" {
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: nack}
		}
		if err := stream.Send(req); err != nil {
			return got, err
		}
	}
}

func (s *Source) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

func (s *Source) accepted(typeURL string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.state[typeURL]; st != nil {
		return st.accepted
	}
	return ""
}

func (s *Source) versions(typeURL string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.state[typeURL]; st != nil && len(st.objects) > 0 {
		return maps.Clone(st.versions)
	}
	return nil
}

func (s *Source) setConnErr(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connErr == e {
		return
	}
	s.connErr = e
	s.publishStatusLocked()
}

// decoded is one resource of a response after decoding and validation.
type decoded struct {
	name     string
	obj      *store.Object // nil when rejected or deleted
	deleted  bool          // a resource without a body
	errs     []store.ConfigError
	warnings []store.ConfigError
}

// decode turns one resource of a response into an object, validated as a
// file is (filestore.DecodeFile on the object written as a document).
func (s *Source) decode(t mcptypes.Type, version string, name string, a *anypb.Any) decoded {
	label := func(n string) string { return t.URL() + " " + n }
	fail := func(n, format string, args ...any) decoded {
		return decoded{name: n, errs: []store.ConfigError{{File: label(n), Message: fmt.Sprintf(format, args...)}}}
	}
	r, err := t.Decode(a)
	if err != nil {
		return fail(name, "%v", err)
	}
	rn := mcptypes.ResourceName(r.Namespace, r.Name)
	if name != "" && name != rn {
		return fail(name, "resource named %q holds the object %q", name, rn)
	}
	if r.Spec == nil {
		return decoded{name: rn, deleted: true}
	}
	spec, err := protojson.Marshal(r.Spec)
	if err != nil {
		return fail(rn, "%v", err)
	}
	doc := map[string]any{
		"apiVersion": t.APIVersion(),
		"kind":       t.Kind,
		"metadata":   map[string]any{"name": r.Name, "namespace": r.Namespace, "labels": r.Labels, "annotations": r.Annotations},
		"spec":       json.RawMessage(spec),
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return fail(rn, "%v", err)
	}
	file := label(rn)
	d := filestore.DecodeFile(file, data, s.cfg.Limits)
	relabel := func(es []store.ConfigError) []store.ConfigError {
		out := make([]store.ConfigError, len(es))
		for i, e := range es {
			e.File, e.Line = file, 0
			if r.Version != "" {
				e.Message += " (resource version " + store.Quote(r.Version) + ")"
			}
			out[i] = e
		}
		return out
	}
	out := decoded{name: rn, errs: relabel(d.Errors), warnings: relabel(d.Warnings)}
	if len(d.Errors) > 0 || len(d.Objects) != 1 {
		if len(out.errs) == 0 {
			out.errs = []store.ConfigError{{File: file, Message: "the resource decodes to no object"}}
		}
		return out
	}
	o := d.Objects[0]
	o.Origin = store.Origin{Source: s.src.Name, File: file, Version: cmp.Or(r.Version, version)}
	o.SetFieldLines(nil)
	out.obj = o
	return out
}

// applySotW applies a complete set of one type; it returns the NACK
// message, "" to ACK.
func (s *Source) applySotW(resp *discovery.DiscoveryResponse) string {
	t, ok := s.types[resp.GetTypeUrl()]
	if !ok {
		return fmt.Sprintf("type %s was not subscribed to", resp.GetTypeUrl())
	}
	var all []decoded
	for i, a := range resp.GetResources() {
		d := s.decode(t, resp.GetVersionInfo(), "", a)
		if d.name == "" {
			d.name = fmt.Sprintf("resources[%d]", i)
		}
		all = append(all, d)
	}
	return s.apply(t, resp.GetVersionInfo(), all, nil, true)
}

// applyDelta applies the changes of one type; it returns the NACK
// message, "" to ACK.
func (s *Source) applyDelta(resp *discovery.DeltaDiscoveryResponse) string {
	t, ok := s.types[resp.GetTypeUrl()]
	if !ok {
		return fmt.Sprintf("type %s was not subscribed to", resp.GetTypeUrl())
	}
	var all []decoded
	for i, r := range resp.GetResources() {
		d := s.decode(t, cmp.Or(r.GetVersion(), resp.GetSystemVersionInfo()), r.GetName(), r.GetResource())
		if d.name == "" {
			d.name = cmp.Or(r.GetName(), fmt.Sprintf("resources[%d]", i))
		}
		all = append(all, d)
	}
	return s.apply(t, resp.GetSystemVersionInfo(), all, resp.GetRemovedResources(), false)
}

// apply writes one response's decoded resources to the Store: accepted
// ones replace their previous version, rejected ones keep it, and (SotW)
// resources the response no longer names, or (delta) removed ones, go.
func (s *Source) apply(t mcptypes.Type, version string, all []decoded, removed []string, complete bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Responses++
	st := s.state[t.URL()]
	var set []*store.Object
	var remove []store.Key
	seen := map[string]bool{}
	var nacks []string
	drop := func(name string) {
		if o := st.objects[name]; o != nil {
			remove = append(remove, o.Key)
		}
		delete(st.objects, name)
		delete(st.versions, name)
		delete(st.bad, name)
		delete(st.warnings, name)
	}
	for _, d := range all {
		if seen[d.name] {
			nacks = append(nacks, fmt.Sprintf("%s: named twice in one response", d.name))
			continue
		}
		seen[d.name] = true
		switch {
		case len(d.errs) > 0:
			st.bad[d.name] = d.errs
			for _, e := range d.errs {
				nacks = append(nacks, e.Error())
			}
		case d.deleted:
			drop(d.name)
		default:
			// A key named by another resource name of the type would
			// make two objects one: refuse the second.
			dup := false
			for n, o := range st.objects {
				if n != d.name && o.Key == d.obj.Key {
					dup = true
				}
			}
			if dup {
				st.bad[d.name] = []store.ConfigError{{File: d.obj.Origin.File, Object: d.obj.Key.String(), Message: "another resource defines the same object"}}
				nacks = append(nacks, d.name+": another resource defines the same object")
				continue
			}
			if prev := st.objects[d.name]; prev != nil && prev.Key != d.obj.Key {
				remove = append(remove, prev.Key)
			}
			st.objects[d.name] = d.obj
			st.versions[d.name] = d.obj.Origin.Version
			delete(st.bad, d.name)
			st.warnings[d.name] = d.warnings
			set = append(set, d.obj)
		}
	}
	if complete {
		for name := range st.objects {
			if !seen[name] {
				drop(name)
			}
		}
		for name := range st.bad {
			if !seen[name] {
				delete(st.bad, name)
			}
		}
	}
	for _, name := range removed {
		drop(name)
	}
	if len(nacks) == 0 {
		st.accepted = version
		s.stats.ACKs++
	} else {
		s.stats.NACKs++
	}
	s.version = version
	// The objects, the version and the resources' problems in one snapshot.
	if err := s.store.UpdateWithStatus(s.src, set, remove, s.statusLocked()); err != nil {
		// Distinct names and keys are checked above; this names a bug.
		nacks = append(nacks, err.Error())
		s.publishStatusLocked()
	}
	if !s.synced[t.URL()] {
		s.synced[t.URL()] = true
		if len(s.synced) == len(s.types) {
			s.readyOnce.Do(func() { close(s.ready) })
		}
	}
	if len(nacks) > 0 {
		s.log.Warn("MCP response rejected in part: the rejected resources keep their last good version", "type", t.URL(), "version", version, "problems", strings.Join(nacks, "; "))
	}
	return store.Clip(strings.Join(nacks, "; "), 4096)
}

// publishStatusLocked writes the source's status: the rejected resources'
// errors, the accepted ones' warnings, the connection's error, and what
// is held. Callers hold s.mu.
func (s *Source) publishStatusLocked() {
	c := s.statusLocked()
	s.store.SetStatusHeld(s.src, c.Revision, c.Problems, c.Held)
}

// statusLocked records the connection's state on the Store and returns the
// source's status: what publishStatusLocked writes. Callers hold s.mu.
func (s *Source) statusLocked() store.StatusChange {
	var errs []store.ConfigError
	heldBad, objects := 0, 0
	for _, u := range s.typeURLs() {
		st := s.state[u]
		objects += len(st.objects)
		for _, n := range slices.Sorted(maps.Keys(st.bad)) {
			errs = append(errs, st.bad[n]...)
			if st.objects[n] != nil {
				heldBad++
			}
		}
		for _, n := range slices.Sorted(maps.Keys(st.warnings)) {
			errs = append(errs, st.warnings[n]...)
		}
	}
	var held []string
	switch {
	case s.connErr != "":
		s.store.SetConnection(s.src, s.connErr)
	case s.stats.Connects > 0:
		s.store.SetConnection(s.src, "connected")
	default:
		s.store.SetConnection(s.src, "connecting")
	}
	if s.connErr != "" {
		errs = append([]store.ConfigError{{Message: fmt.Sprintf("%s: %s", s.cfg.Address, s.connErr)}}, errs...)
		held = append(held, fmt.Sprintf("%s not connected: keeping its %d objects (version %s)", s.cfg.Address, objects, cmp.Or(s.version, "none")))
	}
	if heldBad > 0 {
		held = append(held, fmt.Sprintf("%d rejected resources of %s keep their last good version", heldBad, s.cfg.Address))
	}
	return store.StatusChange{Revision: s.version, Problems: errs, Held: strings.Join(held, "; ")}
}
