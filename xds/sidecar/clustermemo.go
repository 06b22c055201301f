package sidecar

import (
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
)

// clusterMemo holds, for one snapshot, the outbound clusters and load
// assignments the sidecar scopes generated. A cluster and its assignment
// depend on the service, port and subset, the DestinationRule the scope's
// proxies see, the snapshot (mesh config, service identities) and the
// proxy's locality and failoverPriority labels (locality load balancing) — not on the rest of a scope
// (its namespace's short names, its Sidecar's listeners) — so the scopes of
// a fleet, which mostly see every service through the same rules, generate
// and serialise each once and share the bytes: 20 scopes of 1,000 services
// spent a sixth of a connection storm's CPU building the same 2,000
// clusters twenty times.
type clusterMemo struct {
	snap *model.Snapshot
	mu   sync.Mutex
	m    map[clusterKey]*memoCluster
}

// clusterKey is what an outbound cluster depends on within a snapshot.
type clusterKey struct {
	svc    *model.Service
	port   uint32
	subset string
	dr     *model.DestinationRule
	// locality is the proxy's LocalityKey: its locality and the labels
	// failoverPriority names.
	locality string
}

// memoCluster is one cluster, serialised and as a message (the scope's
// consistency check reads it), and its load assignment when it has one.
// ready is closed once the scope that claimed it has generated it (or
// failed: err).
type memoCluster struct {
	ready      chan struct{}
	err        error
	cluster    *clusterv3.Cluster
	clusterRes *gen.Resource
	cla        *endpointv3.ClusterLoadAssignment
	claRes     *gen.Resource
}

func newClusterMemo(s *model.Snapshot) *clusterMemo {
	return &clusterMemo{snap: s, m: map[clusterKey]*memoCluster{}}
}

// of returns the clusters of refs as v (of snapshot s) sees them, in refs'
// order. With a memo of s, each comes from the memo: the scopes of a
// fleet's first connections start together, so a scope claims the
// clusters no other has, generates those, and waits for the others' (a
// scope generates what it claimed before it waits: no two wait on each
// other). With m nil, or of another snapshot, all are generated here.
func (m *clusterMemo) of(v *model.View, s *model.Snapshot, refs []model.Cluster) ([]*memoCluster, error) {
	out := make([]*memoCluster, len(refs))
	var claimed []int
	if m == nil || m.snap != s {
		for i := range refs {
			out[i] = &memoCluster{ready: make(chan struct{})}
			claimed = append(claimed, i)
		}
	} else {
		locality := v.LocalityKey()
		m.mu.Lock()
		for i, ref := range refs {
			k := clusterKey{svc: ref.Service, port: ref.Port.Number, subset: ref.Subset, dr: ref.DestinationRule, locality: locality}
			if out[i] = m.m[k]; out[i] == nil {
				out[i] = &memoCluster{ready: make(chan struct{})}
				m.m[k] = out[i]
				claimed = append(claimed, i)
			}
		}
		m.mu.Unlock()
	}
	if len(claimed) > 0 {
		generateClaimed(v, refs, out, claimed)
	}
	for _, mc := range out {
		<-mc.ready
		if mc.err != nil {
			return nil, mc.err
		}
	}
	return out, nil
}

// generateClaimed generates the clusters (and assignments) of
// refs[claimed] into out and marks each ready.
func generateClaimed(v *model.View, refs []model.Cluster, out []*memoCluster, claimed []int) {
	crefs := make([]model.Cluster, len(claimed))
	for j, i := range claimed {
		crefs[j] = refs[i]
	}
	cds := ClustersOf(v, crefs)
	for j, i := range claimed {
		mc := out[i]
		mc.cluster = cds[j]
		mc.clusterRes, mc.err = outboundResource(resourcev3.ClusterType, cds[j].GetName(), cds[j])
		if eds := EndpointsOf(v, crefs[j:j+1]); mc.err == nil && len(eds) == 1 {
			mc.cla = eds[0]
			mc.claRes, mc.err = outboundResource(resourcev3.EndpointType, mc.cla.GetClusterName(), mc.cla)
		}
		close(mc.ready)
	}
}
