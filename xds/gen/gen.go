// Package gen is what the proxy kinds (xds/sidecar, xds/grpc, ...) and the
// xDS server (xds) share: a generated resource, serialised once; a group's
// generation (its resources by type at one model snapshot, and what its
// kind keeps with them); what changed between two generations; and the
// interface through which the server asks a kind to generate its groups
// and bring them forward (Kind, KindCache). As go-control-plane splits
// snapshot content from watch status, the kinds make the content and xds
// keeps the watches, what was sent and the members; gen is the seam
// between them. It imports neither xds nor a kind package.
package gen

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/nds"
)

// NameTableType is the type URL of the name table (Istio's NDS): the hosts
// a proxy can see and the IPs that answer for them, which a VM's agent
// serves from its DNS proxy.
const NameTableType = nds.TypeURL

// NameTableName names the one name table resource of a proxy.
const NameTableName = "nametable"

// WorkloadGroupType is the type URL of the WorkloadGroups served to VM
// agents: istio.io/api's WorkloadGroup message, one resource per group of
// the proxy's namespace, named by the group's name.
const WorkloadGroupType = "type.googleapis.com/istio.networking.v1alpha3.WorkloadGroup"

// NumTypes is how many resource types vmesh serves (TypeURLs).
const NumTypes = 6

// TypeURLs returns the resource types vmesh serves, in push order. Every
// generation has a map for each. (An array: returning it allocates
// nothing.)
func TypeURLs() [NumTypes]string {
	return [...]string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType, NameTableType, WorkloadGroupType}
}

// ShortType names a type URL for logs, metrics and messages: "LDS",
// "RDS", "CDS", "EDS", "NDS", "WorkloadGroup"; another type by its URL.
func ShortType(typeURL string) string {
	switch typeURL {
	case resourcev3.ListenerType:
		return "LDS"
	case resourcev3.RouteType:
		return "RDS"
	case resourcev3.ClusterType:
		return "CDS"
	case resourcev3.EndpointType:
		return "EDS"
	case NameTableType:
		return "NDS"
	case WorkloadGroupType:
		return "WorkloadGroup"
	}
	return typeURL
}

// Version returns the version_info for config generated from s: "r<store
// revision>", plus "@<short commit>" when the config came from git.
func Version(s *model.Snapshot) string {
	v := "r" + strconv.FormatInt(s.Revision, 10)
	if s.Commit != "" {
		v += "@" + s.Commit
	}
	return v
}

// Resource is one generated resource, serialised once and shared by every
// response that carries it. Immutable once made, but for Refs.
type Resource struct {
	// Name is the resource's xDS name.
	Name string
	// Msg is the resource as generated; nil for a resource kept only in
	// its serialised form (Any). Read it through Message where it may be
	// nil.
	Msg proto.Message
	// Any is the serialised resource, as responses carry it.
	Any *anypb.Any
	// Hash is the resource's version: a hash of its serialised form.
	Hash string
	// Refs are the clusters a route configuration names, made by the
	// server on first use (its make-before-break); kinds leave it alone.
	Refs atomic.Pointer[RouteRefs]
}

// RouteRefs are the clusters a route configuration names: in the routes
// that take RPCs (Used), and in a warming route (Warm), whose marker
// cluster is Marker.
type RouteRefs struct {
	Used, Warm map[string]bool
	Marker     string
}

// NewResource serialises m (deterministically) as the resource name.
func NewResource(name string, m proto.Message) (*Resource, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", name, err)
	}
	return ResourceFromBytes(name, m, b), nil
}

// ResourceFromBytes is NewResource for m serialised as b.
func ResourceFromBytes(name string, m proto.Message, b []byte) *Resource {
	return &Resource{
		Name: name,
		Msg:  m,
		Any:  &anypb.Any{TypeUrl: resourcev3.APITypePrefix + string(m.ProtoReflect().Descriptor().FullName()), Value: b},
		Hash: strconv.FormatUint(xxhash.Sum64(b), 36),
	}
}

// Message returns the resource as a message: Msg, or decoded from its
// serialised form when only that is kept.
func (r *Resource) Message() (proto.Message, error) {
	if r.Msg != nil {
		return r.Msg, nil
	}
	m, err := r.Any.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", r.Name, err)
	}
	return m, nil
}

// ResourceMap is one type's resources by name.
type ResourceMap = cowmap.Map[string, *Resource]

// Apply returns old with each name in changed set to its resource in
// fresh, or deleted when fresh has none: what the changed names do not
// touch is shared (cowmap); old itself when nothing changed.
func Apply(old *ResourceMap, changed map[string]bool, fresh map[string]*Resource) *ResourceMap {
	if len(changed) == 0 {
		return old
	}
	e := old.Edit()
	for name := range changed {
		if r := fresh[name]; r != nil {
			e.Set(name, r)
		} else {
			e.Delete(name)
		}
	}
	return e.Map()
}

// EmptyMap returns a map with no resources (every type of a generation has
// a map).
func EmptyMap() *ResourceMap { return cowmap.New[string, *Resource]() }

// Generation is the config of one proxy group at one model snapshot. Its
// resource maps are immutable; what the group's kind keeps besides them
// (what it makes on demand, the parts it was composed from) is its Part.
type Generation struct {
	// Snap is the snapshot the group was generated at.
	Snap *model.Snapshot
	// Workload is the workload of the proxy that defined the group (any
	// proxy of the group generates the same config).
	Workload model.Workload
	// Key is the group's key (model.ViewKey).
	Key string
	// Version is Version(Snap).
	Version string
	// Types holds each type's resources by name. A generation derived
	// from another shares what it does not change, down to parts of these
	// maps (cowmap).
	Types map[string]*ResourceMap
	// Part is what the group's kind keeps with it; only the kind reads
	// it. Nil for a kind that keeps nothing.
	Part Part

	// served holds the resources the server makes on demand for this
	// generation (OnDemand).
	servedMu sync.Mutex
	served   map[[2]string]*Resource
}

// Part is what a group's kind keeps with its generation.
type Part interface {
	// Lookup returns a resource of g the kind makes on demand by name
	// (names only the proxies know); nil when it makes none of that name.
	Lookup(g *Generation, typeURL, name string) *Resource
	// TakeRefused returns, and resets, how many names Lookup refused
	// because the group had made the most it may (max).
	TakeRefused() (refused int64, max int)
}

// New returns a generation of group key of w at s with types (and no
// part).
func New(s *model.Snapshot, w model.Workload, key string, types map[string]*ResourceMap) *Generation {
	return &Generation{Snap: s, Workload: w, Key: key, Version: Version(s), Types: types}
}

// Get returns g's resource of a type by name, or nil (what the kind makes
// on demand is its Part's Lookup).
func (g *Generation) Get(typeURL, name string) *Resource {
	m := g.Types[typeURL]
	if m == nil {
		return nil
	}
	r, _ := m.Get(name)
	return r
}

// Count returns how many resources of a type g holds.
func (g *Generation) Count(typeURL string) int {
	if m := g.Types[typeURL]; m != nil {
		return m.Len()
	}
	return 0
}

// TakeRefused returns, and resets, how many names g's kind refused to
// make on demand, and the most it makes.
func (g *Generation) TakeRefused() (refused int64, max int) {
	if g.Part == nil {
		return 0, 0
	}
	return g.Part.TakeRefused()
}

// OnDemand returns the resource the server makes on demand under typeURL
// and name for this generation: made by mk on first use and kept, at most
// max of them; nil past max.
func (g *Generation) OnDemand(typeURL, name string, max int, mk func() *Resource) *Resource {
	g.servedMu.Lock()
	defer g.servedMu.Unlock()
	k := [2]string{typeURL, name}
	r, ok := g.served[k]
	if !ok {
		if len(g.served) >= max {
			return nil
		}
		r = mk()
		if g.served == nil {
			g.served = map[[2]string]*Resource{}
		}
		g.served[k] = r
	}
	return r
}

// Diff is what changed between a group's previous generation and its
// current one, per type URL.
type Diff struct {
	// Prev is the generation the changes are from.
	Prev *Generation
	// Changed holds, by type, the names whose resources differ (or came
	// or went).
	Changed map[string]map[string]bool
	// InboundSame says the resources made on demand cannot differ (the
	// generation was updated, not generated again), so Changed covers
	// every name.
	InboundSame bool
}

// Compare compares two generations of a group resource by resource (what
// the resources made on demand are is not known: InboundSame is false).
func Compare(prev, next *Generation) *Diff {
	types := TypeURLs()
	d := &Diff{Prev: prev, Changed: make(map[string]map[string]bool, NumTypes)}
	same := func(a, b *Resource) bool { return a == b || a.Hash == b.Hash }
	for _, t := range types {
		ch := map[string]bool{}
		if prev.Types[t] != nil && next.Types[t] != nil {
			for n := range cowmap.Changed(prev.Types[t], next.Types[t], same) {
				ch[n] = true
			}
		}
		d.Changed[t] = ch
	}
	return d
}
