package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// goodFile is where the last good commit is remembered across restarts.
func (r *rolloutSource) goodFile() string {
	return filepath.Join(r.cp.cfg.DataDir, "rollout", "good")
}

// save remembers commit as the last good one; a failure is logged (a
// restart then starts from the commit the git source serves).
func (r *rolloutSource) save(commit string) {
	f := r.goodFile()
	err := os.MkdirAll(filepath.Dir(f), 0o700)
	if err == nil {
		tmp := f + ".tmp"
		if err = os.WriteFile(tmp, []byte(commit+"\n"), 0o600); err == nil {
			err = os.Rename(tmp, f)
		}
	}
	if err != nil {
		r.cp.log.Warn("rollout: cannot remember the last good commit; a restart serves the branch's commit to every proxy", "commit", commit, "error", err)
	}
}

// Keep implements xds.RolloutSource. The first Keep (commit "") of a
// process starts from the last good commit a previous run remembered,
// when the git source now serves another one: that one then goes through
// the rollout again rather than to every proxy at once.
func (r *rolloutSource) Keep(commit string) string {
	if r.cp.git == nil {
		return ""
	}
	objs, rev := r.cp.store.SourceObjects(r.cp.git.Source().Name)
	if rev == "" || commit != "" && short(rev) != commit {
		return ""
	}
	if commit == "" {
		if b, err := os.ReadFile(r.goodFile()); err == nil {
			if saved := strings.TrimSpace(string(b)); saved != "" && saved != rev {
				ctx, cancel := context.WithTimeout(context.Background(), r.cp.cfg.Git.Timeout)
				full, old, err := r.cp.git.ObjectsAt(ctx, saved)
				cancel()
				if err == nil {
					r.keep(old, full)
					r.cp.log.Info("rollout: starting from the last good commit of the previous run", "good", full, "serving", rev)
					return short(full)
				}
				r.cp.log.Warn("rollout: cannot read the last good commit of the previous run; keeping the git source's", "good", saved, "serving", rev, "error", err)
			}
		}
	}
	r.mu.Lock()
	r.kept = &keptCommit{objects: objs, commit: rev}
	r.mu.Unlock()
	r.save(rev)
	return short(rev)
}

// keep makes objs at commit the kept config.
func (r *rolloutSource) keep(objs []*store.Object, commit string) {
	m := make(map[store.Key]*store.Object, len(objs))
	for _, o := range objs {
		m[o.Key] = o
	}
	r.mu.Lock()
	r.kept = &keptCommit{objects: m, commit: commit}
	r.mu.Unlock()
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
	r.keep(objs, commit)
	r.save(commit)
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
