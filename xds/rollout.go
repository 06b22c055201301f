package xds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmesh/vmesh/model"
)

// Staged rollout of a git commit.
//
// A commit that changes the config goes first to the canary proxies (a
// label selector, or a percentage of the proxies by a hash of their id),
// served from the candidate cache, while every other proxy keeps the last
// good commit, served from the base cache (arms.go). After the bake time,
// when no canary rejected the commit (NACK) and no endpoint turned
// unhealthy, the commit is promoted: it becomes the last good one and goes
// to every proxy. Otherwise it is held: the canaries return to the last
// good commit, and the held commit is reported by SHA (/debug/rollout,
// `vmesh status`, the console, vmesh_rollout_held and the log) until a
// newer commit replaces it or an operator promotes it. One candidate at a
// time: a newer commit during a bake replaces the candidate and bakes
// afresh. Both versions follow every other change (registries, agents'
// registrations and health) at once: the last good one is the Store as it
// is with the git source's objects at the last good commit
// (RolloutSource.Stable).
//
// Error rates are not watched: vmesh receives no telemetry.

// RolloutSource is what a staged rollout needs of the config; the control
// plane implements it over the Store and the git source.
type RolloutSource interface {
	// Keep records the git source's objects as they are now as the last
	// good config, when they are at commit (a short SHA; "" keeps any), and
	// returns the commit kept ("" when they are not at commit).
	Keep(commit string) string
	// Stable returns the snapshot of the config as it is, with the git
	// source's objects at the kept commit.
	Stable() *model.Snapshot
	// Pin loads commit rev of the repository as the kept config and
	// returns its short SHA.
	Pin(ctx context.Context, rev string) (string, error)
	// Unhealthy names the endpoints that are reported unhealthy now.
	Unhealthy() []string
}

// RolloutOptions configure the staged rollout of git commits.
type RolloutOptions struct {
	// Source gives the last good config.
	Source RolloutSource
	// Selector chooses the canaries: the proxies whose labels include all
	// of it.
	Selector map[string]string
	// Percent, without a Selector, makes about this percentage of the
	// proxies canaries (those whose id hashes below it).
	Percent int
	// Bake is how long a commit stays with the canaries alone.
	Bake time.Duration
}

// Validate checks the options.
func (o *RolloutOptions) Validate() error {
	switch {
	case o.Source == nil:
		return errors.New("xds: rollout without a source")
	case o.Bake <= 0:
		return fmt.Errorf("xds: rollout bake time %s must be positive", o.Bake)
	case len(o.Selector) == 0 && (o.Percent <= 0 || o.Percent >= 100):
		return fmt.Errorf("xds: rollout canaries: a label selector or a percentage between 1 and 99 (got %d)", o.Percent)
	}
	return nil
}

// Rollout phases (RolloutStatus.Phase).
const (
	PhaseIdle   = "idle"   // every proxy has the last good commit
	PhaseBaking = "baking" // the candidate is with the canaries
	PhaseHeld   = "held"   // the candidate failed; every proxy has the last good commit
	PhasePinned = "pinned" // an operator pinned every proxy to a commit
)

// RolloutStatus is the state of the staged rollout (/debug/rollout).
type RolloutStatus struct {
	Phase string `json:"phase"`
	// Good is the last good commit (the pinned one when pinned).
	Good string `json:"good,omitempty"`
	// Candidate is the commit baking or held.
	Candidate string `json:"candidate,omitempty"`
	// Since is when the candidate arrived, was held or pinned.
	Since time.Time `json:"since,omitzero"`
	// BakeEnds is when a baking candidate is promoted if nothing fails.
	BakeEnds time.Time `json:"bakeEnds,omitzero"`
	// Reason says why the candidate is held.
	Reason string `json:"reason,omitempty"`
	// Canaries are the connected proxies served the candidate.
	Canaries []string `json:"canaries,omitempty"`
	// Rejected are the proxies that rejected (NACKed) the candidate.
	Rejected []string `json:"rejected,omitempty"`
	// Selector, Percent and Bake are the settings.
	Selector string `json:"selector,omitempty"`
	Percent  int    `json:"percent,omitempty"`
	Bake     string `json:"bake"`
}

// rollout is the rollout's state; guarded by mu, and changed only with
// Server.pushMu held too (a change moves streams and pushes).
type rollout struct {
	opts RolloutOptions
	held *prometheus.GaugeVec

	mu     sync.Mutex
	good   string // the last good commit (short)
	cand   string // the candidate commit (short), "" when none
	phase  string
	since  time.Time
	reason string
	// unhealthy are the endpoints unhealthy when the candidate arrived.
	unhealthy map[string]bool
	// nack is the first NACK of the baking candidate, "" when none;
	// rejected the proxies that NACKed it.
	nack     string
	rejected map[string]bool
	timer    *time.Timer
}

// settleWait is how long after its bake time a candidate waits for every
// canary to have answered it before it is held: a canary that has not
// applied the commit proves nothing.
func (r *rollout) settleWait() time.Duration { return max(r.opts.Bake, 10*time.Second) }

// isCanary reports whether proxy p is a canary.
func (r *rollout) isCanary(p *Proxy) bool {
	if len(r.opts.Selector) > 0 {
		for k, v := range r.opts.Selector {
			if got, ok := p.Labels[k]; !ok || got != v {
				return false
			}
		}
		return true
	}
	h := fnv.New32a()
	h.Write([]byte(p.ID))
	return int(h.Sum32()%100) < r.opts.Percent
}

// regressionLocked names an endpoint that turned unhealthy since the
// candidate arrived, or "". Callers hold r.mu.
func (r *rollout) regressionLocked() string {
	for _, e := range r.opts.Source.Unhealthy() {
		if !r.unhealthy[e] {
			return "endpoint " + e + " turned unhealthy"
		}
	}
	return ""
}

// rolloutPushLocked serves snap (the Store's config, at the git source's
// latest applied commit) by the rollout: to every proxy when its commit is
// the last good one, else to the canaries while the rest keep the last
// good commit. Callers hold s.pushMu.
func (s *Server) rolloutPushLocked(snap *model.Snapshot, changed time.Time) pushStats {
	r := s.rollout
	r.mu.Lock()
	if r.good == "" && r.phase != PhasePinned {
		r.good = r.opts.Source.Keep("")
	}
	stable, cand := snap, (*model.Snapshot)(nil)
	switch {
	case r.phase == PhasePinned:
		stable = r.opts.Source.Stable()
	case snap.Commit == "" || r.good == "" || snap.Commit == r.good:
		if r.cand != "" {
			s.logger.Info("rollout: the last good commit is back; no candidate", "commit", r.good, "candidate", r.cand)
		}
		r.setLocked(PhaseIdle, "", "")
	default:
		if snap.Commit != r.cand {
			r.setLocked(PhaseBaking, snap.Commit, "")
			r.nack, r.rejected = "", map[string]bool{}
			r.unhealthy = map[string]bool{}
			for _, e := range r.opts.Source.Unhealthy() {
				r.unhealthy[e] = true
			}
			commit := snap.Commit
			if r.timer != nil {
				r.timer.Stop()
			}
			r.timer = time.AfterFunc(r.opts.Bake, func() { s.bakeDone(commit, time.Now().Add(r.settleWait())) })
			s.logger.Info("rollout: commit goes to the canaries", "commit", commit, "good", r.good, "bake", r.opts.Bake)
		} else if r.phase == PhaseBaking {
			if why := r.regressionLocked(); why != "" {
				r.holdLocked(s, why)
			}
		}
		stable, cand = r.opts.Source.Stable(), snap
	}
	canaries := r.phase == PhaseBaking
	r.mu.Unlock()

	st := s.cache.push(stable, changed)
	if cand != nil {
		cst := s.cand.push(cand, changed)
		st.responses += cst.responses
	}
	s.setCanariesLocked(canaries)
	return st
}

// setCanariesLocked moves the canaries to the candidate cache (on) or
// every stream to the base cache. Callers hold s.pushMu.
func (s *Server) setCanariesLocked(on bool) {
	if on == s.canariesOn {
		return
	}
	s.canariesOn = on
	var moved int
	if on {
		moved = s.arms.setCanary(s.rollout.isCanary)
	} else {
		moved = s.arms.setCanary(nil)
	}
	s.logger.Info("rollout: streams moved", "toCandidate", on, "streams", moved)
}

// setLocked changes the phase and candidate. Callers hold r.mu.
func (r *rollout) setLocked(phase, cand, reason string) {
	if phase != r.phase || cand != r.cand {
		r.since = time.Now()
	}
	if phase != PhaseBaking && r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.phase, r.cand, r.reason = phase, cand, reason
	r.held.Reset()
	if phase == PhaseHeld {
		r.held.WithLabelValues(cand).Set(1)
	} else {
		r.held.WithLabelValues("").Set(0)
	}
}

// holdLocked holds the candidate for reason. Callers hold r.mu (and
// s.pushMu).
func (r *rollout) holdLocked(s *Server, reason string) {
	r.setLocked(PhaseHeld, r.cand, reason)
	s.logger.Warn("rollout: commit held; the canaries return to the last good commit", "commit", r.cand, "good", r.good, "reason", reason)
}

// bakeDone ends the bake of commit: promoted when nothing failed and
// every canary has applied it; held when a canary rejected it, an endpoint
// turned unhealthy, or a canary has not applied it by giveUp.
func (s *Server) bakeDone(commit string, giveUp time.Time) {
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	r := s.rollout
	r.mu.Lock()
	if r.phase != PhaseBaking || r.cand != commit {
		r.mu.Unlock()
		return
	}
	why := r.nack
	if why == "" {
		why = r.regressionLocked()
	}
	if why == "" && s.canariesOn {
		// The canaries' NACKs are recorded before their next watch
		// opens (rolloutNack), so a settled canary did not reject it.
		if ok, who := s.cand.settled(); !ok {
			if time.Now().Before(giveUp) {
				r.timer = time.AfterFunc(min(r.opts.Bake, 100*time.Millisecond), func() { s.bakeDone(commit, giveUp) })
				r.mu.Unlock()
				return
			}
			why = "canary " + who + " has not applied the commit"
		}
	}
	if why != "" {
		r.holdLocked(s, why)
		r.mu.Unlock()
		s.setCanariesLocked(false)
		return
	}
	r.mu.Unlock()
	if err := s.promoteLocked("bake time passed with no NACK and no endpoint turned unhealthy"); err != nil {
		s.logger.Info("rollout: candidate not promoted", "commit", commit, "error", err)
	}
}

// promoteLocked makes the candidate the last good commit and serves it to
// every proxy. Callers hold s.pushMu.
func (s *Server) promoteLocked(why string) error {
	r := s.rollout
	r.mu.Lock()
	if r.cand == "" {
		r.mu.Unlock()
		return errors.New("no candidate commit to promote")
	}
	kept := r.opts.Source.Keep(r.cand)
	if kept == "" {
		r.mu.Unlock()
		// The git source moved on: its newer commit replaces the
		// candidate at the next push.
		return fmt.Errorf("commit %s is no longer the git source's latest", r.cand)
	}
	cand := r.cand
	r.good = kept
	r.setLocked(PhaseIdle, "", "")
	r.mu.Unlock()
	s.logger.Info("rollout: commit promoted to every proxy", "commit", cand, "why", why)
	if s.last != nil {
		s.cache.push(s.last, time.Now())
	}
	s.setCanariesLocked(false)
	return nil
}

// hold holds commit, when it is the baking candidate, for reason.
func (s *Server) hold(commit, reason string) {
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	r := s.rollout
	r.mu.Lock()
	if r.phase != PhaseBaking || r.cand != commit {
		r.mu.Unlock()
		return
	}
	r.holdLocked(s, reason)
	r.mu.Unlock()
	s.setCanariesLocked(false)
}

// rolloutNack holds the candidate when a proxy rejected a version of it.
func (s *Server) rolloutNack(proxy, typ, version, msg string) {
	r := s.rollout
	if r == nil {
		return
	}
	r.mu.Lock()
	commit := r.cand
	ofCand := commit != "" && strings.HasSuffix(version, "@"+commit)
	baking := r.phase == PhaseBaking && ofCand
	if ofCand && r.rejected != nil && (r.phase == PhaseBaking || r.phase == PhaseHeld) {
		r.rejected[proxy] = true
	}
	reason := fmt.Sprintf("NACK from %s (%s): %s", proxy, typ, msg)
	if baking && r.nack == "" {
		r.nack = reason
	}
	r.mu.Unlock()
	if baking {
		go s.hold(commit, reason)
	}
}

// RolloutStatus returns the rollout's state; nil without a rollout.
func (s *Server) RolloutStatus() *RolloutStatus {
	r := s.rollout
	if r == nil {
		return nil
	}
	r.mu.Lock()
	out := &RolloutStatus{Phase: r.phase, Good: r.good, Candidate: r.cand, Since: r.since, Reason: r.reason,
		Selector: model.LabelString(r.opts.Selector), Bake: r.opts.Bake.String()}
	if len(r.opts.Selector) == 0 {
		out.Percent = r.opts.Percent
	}
	if r.phase == PhaseBaking {
		out.BakeEnds = r.since.Add(r.opts.Bake)
	}
	if r.phase == PhaseBaking || r.phase == PhaseHeld {
		out.Rejected = slices.Sorted(maps.Keys(r.rejected))
	}
	r.mu.Unlock()
	out.Canaries = s.arms.onCandidate()
	slices.Sort(out.Canaries)
	return out
}

// Promote sends the candidate, baking or held, to every proxy at once.
func (s *Server) Promote() error {
	if s.rollout == nil {
		return errNoRollout
	}
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	return s.promoteLocked("promoted by an operator")
}

// Abort holds the baking candidate: the canaries return to the last good
// commit.
func (s *Server) Abort() error {
	r := s.rollout
	if r == nil {
		return errNoRollout
	}
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	r.mu.Lock()
	if r.phase != PhaseBaking {
		phase := r.phase
		r.mu.Unlock()
		return fmt.Errorf("no commit is baking (the rollout is %s)", phase)
	}
	r.holdLocked(s, "aborted by an operator")
	r.mu.Unlock()
	s.setCanariesLocked(false)
	return nil
}

// Pin serves commit rev to every proxy, whatever the git source's latest
// commit, until Unpin. It returns the pinned commit.
func (s *Server) Pin(ctx context.Context, rev string) (string, error) {
	r := s.rollout
	if r == nil {
		return "", errNoRollout
	}
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	commit, err := r.opts.Source.Pin(ctx, rev)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.good = commit
	r.setLocked(PhasePinned, "", "")
	r.mu.Unlock()
	s.logger.Warn("rollout: every proxy pinned to a commit", "commit", commit)
	s.cache.push(r.opts.Source.Stable(), time.Now())
	s.setCanariesLocked(false)
	return commit, nil
}

// Unpin ends a pin: the git source's latest commit, when it is not the
// pinned one, goes through the rollout (to the canaries first).
func (s *Server) Unpin() error {
	r := s.rollout
	if r == nil {
		return errNoRollout
	}
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	r.mu.Lock()
	if r.phase != PhasePinned {
		r.mu.Unlock()
		return errors.New("not pinned")
	}
	r.setLocked(PhaseIdle, "", "")
	r.mu.Unlock()
	s.logger.Info("rollout: pin removed")
	if s.last != nil {
		s.rolloutPushLocked(s.last, time.Now())
	}
	return nil
}

var errNoRollout = errors.New("no staged rollout is configured (git.rollout in vmesh.yaml)")

// RolloutHandler serves /debug/rollout: GET the state (RolloutStatus);
// POST .../promote, .../abort, .../pin?rev=REV and .../unpin act on it.
func (s *Server) RolloutHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		action := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
		if req.Method == http.MethodGet && (action == "rollout" || action == "") {
			st := s.RolloutStatus()
			if st == nil {
				http.Error(w, errNoRollout.Error(), http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(st)
			return
		}
		if req.Method != http.MethodPost {
			http.Error(w, "POST to act on the rollout", http.StatusMethodNotAllowed)
			return
		}
		var err error
		switch action {
		case "promote":
			err = s.Promote()
		case "abort":
			err = s.Abort()
		case "pin":
			rev := req.URL.Query().Get("rev")
			if rev == "" {
				http.Error(w, "pin needs ?rev=REV", http.StatusBadRequest)
				return
			}
			_, err = s.Pin(req.Context(), rev)
		case "unpin":
			err = s.Unpin()
		default:
			http.Error(w, "unknown rollout action "+action, http.StatusNotFound)
			return
		}
		if err != nil {
			code := http.StatusConflict
			if errors.Is(err, errNoRollout) {
				code = http.StatusNotFound
			}
			http.Error(w, err.Error(), code)
			return
		}
		st := s.RolloutStatus()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
}

// Summary is the rollout's state in one line, for `vmesh status`, `vmesh
// rollout status` and the console.
func (st *RolloutStatus) Summary() string {
	switch st.Phase {
	case PhaseBaking:
		return fmt.Sprintf("commit %s baking on %d canaries until %s; the rest serve %s", st.Candidate, len(st.Canaries), st.BakeEnds.UTC().Format(time.RFC3339), st.Good)
	case PhaseHeld:
		return fmt.Sprintf("commit %s HELD (%s); every proxy serves %s", st.Candidate, st.Reason, st.Good)
	case PhasePinned:
		return fmt.Sprintf("every proxy PINNED to commit %s (vmesh unpin resumes the rollout)", st.Good)
	}
	return "every proxy serves commit " + st.Good
}
