// Package autoregister turns connected vmesh agents into WorkloadEntries, as
// Istio's WorkloadGroup auto-registration does: an agent whose node names a
// WorkloadGroup (metadata AUTO_REGISTER_GROUP) gets a WorkloadEntry
// "<group>-<ip>" built from the group's template while it is connected, its
// health reports decide whether it is an endpoint, and it is removed a grace
// period after its last stream closes. The entries are one Store source,
// "registration", which files, git and registries all win over.
//
// An agent whose node names instead a WorkloadEntry of the config
// (WORKLOAD_ENTRY) annotated proxy.istio.io/health-checks-enabled becomes
// that entry's health controller, as in Istio: its reports decide whether
// the entry is an endpoint (store.Store.SetHealth), and a grace period
// after its last stream closes the entry's health is unknown again, so it
// stops being one.
package autoregister

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/internal/refusal"
	"github.com/vmesh/vmesh/store"
)

// DefaultGrace is how long an entry outlives its agent's last stream (Istio's
// default cleanup grace).
const DefaultGrace = 10 * time.Second

// Refusal reasons of auto-registration (the ErrorInfo reason the agent
// gets); every one is permanent.
const (
	ReasonNoInstanceIPs    = "no_instance_ips"
	ReasonNoWorkloadGroup  = "workload_group_not_found"
	ReasonUnauthenticated  = "registration_unauthenticated"
	ReasonIdentityMismatch = "registration_identity_mismatch"
	// ReasonNoWorkloadEntry is not permanent: the entry may arrive with
	// the next config change, and the agent retries.
	ReasonNoWorkloadEntry = "workload_entry_not_found"
)

// Source is the Store source of registrations.
var Source = store.Source{Name: "registration", Class: store.ClassRegistration}

// Authenticator returns the namespace and service account a stream's peer
// proved (its mesh certificate), or an error.
type Authenticator func(ctx context.Context) (namespace, serviceAccount string, err error)

// Agent is what the Registrar reads of a connected proxy's node (xDS node
// metadata). The xDS server's stream events reach the Registrar through
// the control plane's wiring (cmd/internal/controlplane), which hands it
// each proxy as an Agent: the Registrar, a writer of the Store, does not
// import xds.
type Agent struct {
	ID             string
	Namespace      string
	Labels         map[string]string
	ServiceAccount string
	IPs            []string
	// AutoRegisterGroup is the WorkloadGroup the agent registers under.
	AutoRegisterGroup string
	// WorkloadEntry names the config-defined WorkloadEntry whose health
	// the agent reports.
	WorkloadEntry string
	// Network and Locality ("region/zone/subzone") describe where it runs.
	Network  string
	Locality string
	// Envoy says the proxy is an Envoy sidecar, in front of a workload
	// that takes mTLS.
	Envoy bool
}

// Config configures a Registrar.
type Config struct {
	// Grace is how long an entry outlives its last stream; default DefaultGrace.
	Grace time.Duration
	// Authenticate, when set, must vouch for every registering stream: the
	// peer's namespace must be the proxy's, and its service account the
	// group template's (when the template names one). Without it,
	// registrations are trusted as the node says (tests only).
	Authenticate Authenticator
}

// Registrar keeps the registration source from the agents' streams
// (StreamOpened, StreamClosed, Health).
type Registrar struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger

	mu       sync.Mutex
	entries  map[store.Key]*entry
	byStream map[int64]store.Key
	// checked are the config-defined WorkloadEntries whose health agents
	// report, and checkedBy their streams.
	checked   map[store.Key]*checkedEntry
	checkedBy map[int64]store.Key
	// unchecked are the streams of agents naming a config-defined
	// WorkloadEntry that is not health-checked: their reports are ignored
	// (as Istio's), counted in ignoredReports, and the entry of each that
	// has reported is warning VM1013 on the source's status.
	unchecked      map[int64]*uncheckedStream
	ignoredReports int64
}

// uncheckedStream is an agent's stream whose health reports are ignored.
type uncheckedStream struct {
	key      store.Key
	reported bool // a report was ignored
}

// checkedEntry is a config-defined, health-checked WorkloadEntry with the
// streams of the agents that report its health.
type checkedEntry struct {
	streams map[int64]bool
	expire  *time.Timer
}

type entry struct {
	key     store.Key
	group   store.Key
	proxy   Agent
	ip      string
	streams map[int64]bool
	healthy *bool
	reason  string
	expire  *time.Timer
	// envoy is set once an Envoy sidecar's stream (a node without
	// GENERATOR=grpc) registered the entry: the VM runs an Envoy.
	envoy bool
}

// New returns a Registrar writing to store.
func New(st *store.Store, cfg Config, logger *slog.Logger) *Registrar {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Registrar{cfg: cfg, store: st, log: logger.With("component", "autoregister"),
		entries: map[store.Key]*entry{}, byStream: map[int64]store.Key{},
		checked: map[store.Key]*checkedEntry{}, checkedBy: map[int64]store.Key{}, unchecked: map[int64]*uncheckedStream{}}
}

// warnLocked puts warning VM1013 on the source's status for each entry
// whose agents' reports are ignored, at the entry's file and line. Callers
// hold r.mu.
func (r *Registrar) warnLocked() {
	ignoring := map[store.Key]bool{}
	for _, u := range r.unchecked {
		if u.reported {
			ignoring[u.key] = true
		}
	}
	snap := r.store.Snapshot()
	var warnings []store.ConfigError
	for _, key := range slices.SortedFunc(maps.Keys(ignoring), func(a, b store.Key) int { return strings.Compare(a.String(), b.String()) }) {
		w := store.ConfigError{Object: key.String(), Field: "metadata.annotations", Severity: store.SeverityWarning,
			Code:    store.CodeHealthReportsIgnored,
			Message: fmt.Sprintf("its agent reports its health, which is ignored: the entry is not health-checked, so it stays an endpoint whatever the agent reports; annotate it %s: \"true\" to make it an endpoint only while healthy", meshlabels.HealthChecksAnnotation)}
		if o := snap.Get(key); o != nil {
			w.File, w.Line, w.Commit, w.Source = o.Origin.File, o.Origin.Line, o.Origin.Commit, o.Origin.Source
		}
		warnings = append(warnings, w)
	}
	r.store.SetStatus(Source, "", warnings)
}

// IgnoredHealthReports counts the health reports ignored since start
// because the config-defined WorkloadEntry the agent names is not
// health-checked (vmesh_registrations_ignored_health_reports_total).
func (r *Registrar) IgnoredHealthReports() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ignoredReports
}

// EntryName is Istio's auto-registered WorkloadEntry name:
// <group>-<ip with ':' replaced by '-'>[-<network>].
func EntryName(group, ip, network string) string {
	name := group + "-" + strings.ReplaceAll(ip, ":", "-")
	if network != "" {
		name += "-" + network
	}
	return name
}

// StreamOpened registers the proxy if its node names a WorkloadGroup. A
// registration that cannot be made is refused with a *refusal.Refusal, and
// the xDS server ends the stream with it, as Istio closes the connection of
// a proxy whose auto-registration failed: the agent learns why and stops.
func (r *Registrar) StreamOpened(ctx context.Context, stream int64, p Agent) error {
	if p.AutoRegisterGroup == "" {
		if p.WorkloadEntry != "" {
			return r.controlEntry(ctx, stream, p)
		}
		return nil
	}
	groupKey := store.Key{Kind: store.KindWorkloadGroup, Namespace: p.Namespace, Name: p.AutoRegisterGroup}
	refuse := func(code codes.Code, reason, msg, fix string) error {
		r.log.Warn("auto-registration refused: "+msg, "proxy", p.ID, "group", groupKey.String(), "reason", reason)
		return &refusal.Refusal{Code: code, Reason: reason, Message: "auto-registration into WorkloadGroup " + groupKey.Namespace + "/" + groupKey.Name + " refused: " + msg, Fix: fix, Permanent: true}
	}
	if len(p.IPs) == 0 {
		return refuse(codes.InvalidArgument, ReasonNoInstanceIPs, "the node has no INSTANCE_IPS", "start the agent with --ip ADDRESS (the VM's address other VMs reach)")
	}
	group := r.store.Snapshot().Get(groupKey)
	if group == nil {
		return refuse(codes.FailedPrecondition, ReasonNoWorkloadGroup, "no such WorkloadGroup in the control plane's config",
			"add WorkloadGroup "+groupKey.Name+" in namespace "+groupKey.Namespace+" to the config, or bundle the VM with the --workload-group that exists")
	}
	if r.cfg.Authenticate != nil {
		ns, sa, err := r.cfg.Authenticate(ctx)
		wantSA := group.Spec.(*networking.WorkloadGroup).GetTemplate().GetServiceAccount()
		switch {
		case err != nil:
			return refuse(codes.Unauthenticated, ReasonUnauthenticated, "no mesh certificate vouches for the stream: "+err.Error(),
				"connect through the agent to the secure port (the bundle's discovery address)")
		case ns != p.Namespace || (wantSA != "" && sa != wantSA):
			return refuse(codes.PermissionDenied, ReasonIdentityMismatch,
				fmt.Sprintf("the certificate's identity %s/%s is not the group's %s/%s", ns, sa, p.Namespace, wantSA),
				"bundle the VM with the group's namespace and --service-account "+wantSA)
		}
	}
	ip := p.IPs[0]
	key := store.Key{Kind: store.KindWorkloadEntry, Namespace: p.Namespace, Name: EntryName(p.AutoRegisterGroup, ip, p.Network)}
	r.mu.Lock()
	e := r.entries[key]
	if e == nil {
		e = &entry{key: key, group: groupKey, ip: ip, streams: map[int64]bool{}}
		r.entries[key] = e
		r.log.Info("auto-registered", "entry", key.String(), "proxy", p.ID)
	}
	e.proxy = p
	// The agent labels its own node when it runs Envoy (registration
	// belongs to the agent's stream; Envoy's node names no group).
	e.envoy = e.envoy || p.Envoy || p.Labels[meshlabels.TLSModeLabel] == meshlabels.TLSModeIstio
	e.streams[stream] = true
	r.byStream[stream] = key
	if e.expire != nil {
		e.expire.Stop()
		e.expire = nil
	}
	r.publishLocked()
	r.mu.Unlock()
	return nil
}

// StreamClosed starts the grace period when the entry's last stream ends.
func (r *Registrar) StreamClosed(stream int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u := r.unchecked[stream]; u != nil {
		delete(r.unchecked, stream)
		if u.reported {
			r.warnLocked()
		}
	}
	if key, ok := r.checkedBy[stream]; ok {
		r.releaseEntryLocked(stream, key)
		return
	}
	key, ok := r.byStream[stream]
	if !ok {
		return
	}
	delete(r.byStream, stream)
	e := r.entries[key]
	if e == nil {
		return
	}
	delete(e.streams, stream)
	if len(e.streams) > 0 || e.expire != nil {
		return
	}
	e.expire = time.AfterFunc(r.cfg.Grace, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if cur := r.entries[key]; cur == e && len(e.streams) == 0 {
			delete(r.entries, key)
			r.log.Info("registration removed after grace period", "entry", key.String(), "grace", r.cfg.Grace)
			r.publishLocked()
		}
	})
}

// Health records the agent's report on the entry of the stream.
func (r *Registrar) Health(stream int64, healthy bool, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if key, ok := r.checkedBy[stream]; ok {
		r.log.Info("health reported", "entry", key.String(), "healthy", healthy, "reason", message)
		r.store.SetHealthReason(key, &healthy, message)
		return
	}
	if u := r.unchecked[stream]; u != nil {
		r.ignoredReports++
		if !u.reported {
			u.reported = true
			r.warnLocked()
		}
		return
	}
	e := r.entries[r.byStream[stream]]
	if e == nil {
		return
	}
	if e.healthy != nil && *e.healthy == healthy && e.reason == message {
		return
	}
	e.healthy, e.reason = &healthy, message
	r.log.Info("health reported", "entry", e.key.String(), "healthy", healthy, "reason", message)
	r.publishLocked()
}

// Run rebuilds the entries when WorkloadGroups change, until ctx is done.
func (r *Registrar) Run(ctx context.Context) error {
	sub := r.store.Subscribe()
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			r.mu.Lock()
			for _, e := range r.entries {
				if e.expire != nil {
					e.expire.Stop()
				}
			}
			for _, c := range r.checked {
				if c.expire != nil {
					c.expire.Stop()
				}
			}
			r.mu.Unlock()
			return nil
		case <-sub.C():
			if sub.Take().Kinds()[store.KindWorkloadGroup] {
				r.mu.Lock()
				if len(r.entries) > 0 {
					r.publishLocked()
				}
				r.mu.Unlock()
			}
		}
	}
}

// publishLocked hands the complete set to the Store. Callers hold r.mu.
func (r *Registrar) publishLocked() {
	snap := r.store.Snapshot()
	objs := make([]*store.Object, 0, len(r.entries))
	for _, k := range slices.SortedFunc(maps.Keys(r.entries), func(a, b store.Key) int { return strings.Compare(a.String(), b.String()) }) {
		e := r.entries[k]
		group := snap.Get(e.group)
		if group == nil {
			continue // the group was deleted: its VMs stop being endpoints
		}
		objs = append(objs, entryObject(e, group))
	}
	if err := r.store.Replace(Source, objs); err != nil {
		r.log.Error("publishing registrations", "error", err)
	}
}

// entryObject builds the WorkloadEntry from the group template: labels merge
// template < group metadata < proxy labels, as in Istio.
func entryObject(e *entry, group *store.Object) *store.Object {
	wg := group.Spec.(*networking.WorkloadGroup)
	spec := proto.Clone(wg.GetTemplate()).(*networking.WorkloadEntry)
	if spec == nil {
		spec = &networking.WorkloadEntry{}
	}
	spec.Address = e.ip
	labels := map[string]string{}
	maps.Copy(labels, spec.Labels)
	maps.Copy(labels, wg.GetMetadata().GetLabels())
	maps.Copy(labels, e.proxy.Labels)
	if e.envoy {
		// Stays while the entry lives: an Envoy restart must not flip
		// clients between mTLS and plaintext.
		labels[meshlabels.TLSModeLabel] = meshlabels.TLSModeIstio
	}
	spec.Labels = labels
	if e.proxy.Network != "" {
		spec.Network = e.proxy.Network
	}
	if e.proxy.Locality != "" {
		spec.Locality = e.proxy.Locality
	}
	if spec.ServiceAccount == "" {
		spec.ServiceAccount = e.proxy.ServiceAccount
	}
	annotations := map[string]string{}
	maps.Copy(annotations, wg.GetMetadata().GetAnnotations())
	annotations["vmesh.io/registry"] = "agent"
	annotations["vmesh.io/workload-group"] = group.Name
	annotations["vmesh.io/proxy"] = e.proxy.ID
	o := &store.Object{
		Key: e.key, APIVersion: "networking.istio.io/v1", Labels: labels, Annotations: annotations, Spec: spec,
		Origin: store.Origin{Source: Source.Name, Registry: fmt.Sprintf("agent %s (group %s)", e.proxy.ID, group.Name)},
	}
	if wg.GetProbe() != nil {
		// The agent probes: only a healthy report makes it an endpoint.
		annotations[meshlabels.HealthChecksAnnotation] = "true"
		o.Healthy = e.healthy
		if e.healthy != nil && !*e.healthy {
			o.HealthReason = e.reason
		}
	}
	return o
}

// controlEntry makes the stream the health controller of the config-defined
// WorkloadEntry its node names, as Istio's controller becomes the
// controller of a health-checked WorkloadEntry: the entry must exist (else
// the stream is refused, for now: the agent retries), be health-checked
// (else nothing happens, as in Istio), and the stream's peer must be the
// entry's namespace and service account.
func (r *Registrar) controlEntry(ctx context.Context, stream int64, p Agent) error {
	key := store.Key{Kind: store.KindWorkloadEntry, Namespace: p.Namespace, Name: p.WorkloadEntry}
	refuse := func(code codes.Code, reason, msg, fix string, permanent bool) error {
		r.log.Warn("health control refused: "+msg, "proxy", p.ID, "entry", key.String(), "reason", reason)
		return &refusal.Refusal{Code: code, Reason: reason, Message: "health reports for WorkloadEntry " + key.Namespace + "/" + key.Name + " refused: " + msg, Fix: fix, Permanent: permanent}
	}
	o := r.store.Snapshot().Get(key)
	if o == nil {
		return refuse(codes.FailedPrecondition, ReasonNoWorkloadEntry, "no such WorkloadEntry in the control plane's config",
			"add WorkloadEntry "+key.Name+" in namespace "+key.Namespace+" to the config, or start the agent with the --workload-entry that exists", false)
	}
	if !store.HealthChecksEnabled(o) {
		r.mu.Lock()
		r.unchecked[stream] = &uncheckedStream{key: key}
		r.mu.Unlock()
		return nil
	}
	if r.cfg.Authenticate != nil {
		ns, sa, err := r.cfg.Authenticate(ctx)
		wantSA := ""
		if we, ok := o.Spec.(*networking.WorkloadEntry); ok {
			wantSA = we.GetServiceAccount()
		}
		switch {
		case err != nil:
			return refuse(codes.Unauthenticated, ReasonUnauthenticated, "no mesh certificate vouches for the stream: "+err.Error(),
				"connect through the agent to the secure port (the bundle's discovery address)", true)
		case ns != key.Namespace || (wantSA != "" && sa != wantSA):
			return refuse(codes.PermissionDenied, ReasonIdentityMismatch,
				fmt.Sprintf("the certificate's identity %s/%s is not the entry's %s/%s", ns, sa, key.Namespace, wantSA),
				"bundle the VM with the entry's namespace and --service-account "+wantSA, true)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.checked[key]
	if c == nil {
		c = &checkedEntry{streams: map[int64]bool{}}
		r.checked[key] = c
		r.log.Info("agent reports the health of WorkloadEntry", "entry", key.String(), "proxy", p.ID)
	}
	if c.expire != nil {
		c.expire.Stop()
		c.expire = nil
	}
	c.streams[stream] = true
	r.checkedBy[stream] = key
	return nil
}

// releaseEntryLocked ends a stream's health control of key; a grace period
// after the last one ends, the entry's health is unknown (not an
// endpoint) until an agent reports again. Callers hold r.mu.
func (r *Registrar) releaseEntryLocked(stream int64, key store.Key) {
	delete(r.checkedBy, stream)
	c := r.checked[key]
	if c == nil {
		return
	}
	delete(c.streams, stream)
	if len(c.streams) > 0 || c.expire != nil {
		return
	}
	c.expire = time.AfterFunc(r.cfg.Grace, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if cur := r.checked[key]; cur == c && len(c.streams) == 0 {
			delete(r.checked, key)
			r.log.Info("agent gone: WorkloadEntry health unknown after grace period", "entry", key.String(), "grace", r.cfg.Grace)
			r.store.SetHealth(key, nil)
		}
	})
}
