package xds

import (
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// clusterMemo holds, for one snapshot, the outbound clusters and load
// assignments the sidecar scopes generated. A cluster and its assignment
// depend on the service, port and subset, the DestinationRule the scope's
// proxies see, the snapshot (mesh config, service identities) and the
// proxy's locality (locality load balancing) — not on the rest of a scope
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
	svc      *model.Service
	port     uint32
	subset   string
	dr       *model.DestinationRule
	locality string
}

// memoCluster is one cluster, serialised and as a message (the scope's
// consistency check reads it), and its load assignment when it has one.
type memoCluster struct {
	cluster    *clusterv3.Cluster
	clusterRes *resource
	cla        *endpointv3.ClusterLoadAssignment
	claRes     *resource
}

func newClusterMemo(s *model.Snapshot) *clusterMemo {
	return &clusterMemo{snap: s, m: map[clusterKey]*memoCluster{}}
}

// of returns the clusters of refs as v sees them, in refs' order, each
// from the memo or generated (and kept) when v's snapshot is the memo's;
// m may be nil (nothing is kept).
func (m *clusterMemo) of(v *model.View, s *model.Snapshot, refs []model.Cluster) ([]*memoCluster, error) {
	out := make([]*memoCluster, len(refs))
	keys := make([]clusterKey, len(refs))
	var miss []int
	shared := m != nil && m.snap == s
	locality := v.Workload().Locality
	if shared {
		m.mu.Lock()
	}
	for i, ref := range refs {
		keys[i] = clusterKey{svc: ref.Service, port: ref.Port.Number, subset: ref.Subset, dr: ref.DestinationRule, locality: locality}
		if shared {
			out[i] = m.m[keys[i]]
		}
		if out[i] == nil {
			miss = append(miss, i)
		}
	}
	if shared {
		m.mu.Unlock()
	}
	if len(miss) == 0 {
		return out, nil
	}
	missRefs := make([]model.Cluster, len(miss))
	for j, i := range miss {
		missRefs[j] = refs[i]
	}
	cds := sidecar.ClustersOf(v, missRefs)
	for j, i := range miss {
		mc := &memoCluster{cluster: cds[j]}
		var err error
		if mc.clusterRes, err = outboundResource(resourcev3.ClusterType, cds[j].GetName(), cds[j]); err != nil {
			return nil, err
		}
		if eds := sidecar.EndpointsOf(v, missRefs[j:j+1]); len(eds) == 1 {
			mc.cla = eds[0]
			if mc.claRes, err = outboundResource(resourcev3.EndpointType, mc.cla.GetClusterName(), mc.cla); err != nil {
				return nil, err
			}
		}
		out[i] = mc
	}
	if shared {
		m.mu.Lock()
		for _, i := range miss {
			if had := m.m[keys[i]]; had != nil {
				out[i] = had // another scope's, generated meanwhile: share one
				continue
			}
			m.m[keys[i]] = out[i]
		}
		m.mu.Unlock()
	}
	return out, nil
}

// clusterMemoFor returns the cache's memo for snapshot s, a new one when
// it holds another snapshot's.
func (c *cache) clusterMemoFor(s *model.Snapshot) *clusterMemo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.memo == nil || c.memo.snap != s {
		c.memo = newClusterMemo(s)
	}
	return c.memo
}
