package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

var _ xds.RolloutSource = (*rolloutSource)(nil)

// RolloutConfig is git.rollout in vmesh.yaml: the staged rollout of every
// commit, to the canaries first and to the rest after the bake time when
// no canary rejected it and no endpoint turned unhealthy (xds/rollout.go).
type RolloutConfig struct {
	// Canary chooses the proxies a commit goes to first.
	Canary CanaryConfig `yaml:"canary"`
	// Bake is how long a commit stays with the canaries alone.
	Bake time.Duration `yaml:"bake"`
}

// CanaryConfig chooses the canaries: the proxies whose labels include all
// of Selector, or, without one, about Percent percent of the proxies (by
// a hash of their node id).
type CanaryConfig struct {
	Selector map[string]string `yaml:"selector"`
	Percent  int               `yaml:"percent"`
}

// validate checks the rollout settings.
func (r *RolloutConfig) validate(gitRepo string) error {
	if r == nil {
		return nil
	}
	if gitRepo == "" {
		return errors.New("git.rollout stages git commits: it needs git.repo")
	}
	switch {
	case len(r.Canary.Selector) > 0 && r.Canary.Percent != 0:
		return errors.New("git.rollout.canary: a selector or a percent, not both")
	case len(r.Canary.Selector) == 0 && (r.Canary.Percent <= 0 || r.Canary.Percent >= 100):
		return fmt.Errorf("git.rollout.canary: a label selector, or a percent between 1 and 99 (got %d)", r.Canary.Percent)
	case r.Bake <= 0:
		return fmt.Errorf("git.rollout.bake %s must be > 0", r.Bake)
	}
	return nil
}

// rolloutSource gives the staged rollout the last good config: the Store
// as it is, with the git source's objects at the kept commit.
type rolloutSource struct {
	cp   *ControlPlane
	mesh model.Mesh

	mu   sync.Mutex
	kept *keptCommit
}

// keptCommit is the git source's objects at one commit.
type keptCommit struct {
	objects map[store.Key]*store.Object
	commit  string
}

func newRolloutSource(cp *ControlPlane, mesh model.Mesh) *rolloutSource {
	return &rolloutSource{cp: cp, mesh: mesh, kept: &keptCommit{}}
}

// short is a commit's short SHA, as snapshots and versions show it.
func short(c string) string { return c[:min(12, len(c))] }

// Keep implements xds.RolloutSource.
func (r *rolloutSource) Keep(commit string) string {
	if r.cp.git == nil {
		return ""
	}
	objs, rev := r.cp.store.SourceObjects(r.cp.git.Source().Name)
	if rev == "" || commit != "" && short(rev) != commit {
		return ""
	}
	r.mu.Lock()
	r.kept = &keptCommit{objects: objs, commit: rev}
	r.mu.Unlock()
	return short(rev)
}

// Stable implements xds.RolloutSource.
func (r *rolloutSource) Stable() *model.Snapshot {
	r.mu.Lock()
	k := r.kept
	r.mu.Unlock()
	if k.objects == nil || r.cp.git == nil {
		return model.BuildWith(r.cp.store.Snapshot(), r.mesh)
	}
	return model.BuildWith(r.cp.store.SnapshotWith(r.cp.git.Source().Name, k.objects, k.commit), r.mesh)
}

// Pin implements xds.RolloutSource.
func (r *rolloutSource) Pin(ctx context.Context, rev string) (string, error) {
	if r.cp.git == nil {
		return "", errors.New("no git source")
	}
	commit, objs, err := r.cp.git.ObjectsAt(ctx, rev)
	if err != nil {
		return "", fmt.Errorf("pin %s: %w", rev, err)
	}
	m := make(map[store.Key]*store.Object, len(objs))
	for _, o := range objs {
		m[o.Key] = o
	}
	r.mu.Lock()
	r.kept = &keptCommit{objects: m, commit: commit}
	r.mu.Unlock()
	return short(commit), nil
}

// Unhealthy implements xds.RolloutSource: the WorkloadEntries an agent or
// the shared state reports unhealthy.
func (r *rolloutSource) Unhealthy() []string {
	var out []string
	for _, o := range r.cp.store.Snapshot().List(store.KindWorkloadEntry) {
		if o.Healthy != nil && !*o.Healthy {
			out = append(out, o.Namespace+"/"+o.Name)
		}
	}
	return out
}
