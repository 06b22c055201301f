package controlplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// rolloutRepo is a git repository of mesh config a test commits to.
type rolloutRepo struct {
	t   *testing.T
	dir string
}

func (g *rolloutRepo) git(args ...string) string {
	g.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = g.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		g.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files (name -> YAML, "" removes) and commits them,
// returning the commit's short SHA.
func (g *rolloutRepo) commit(files map[string]string) string {
	g.t.Helper()
	for name, doc := range files {
		p := filepath.Join(g.dir, name)
		if doc == "" {
			if err := os.Remove(p); err != nil {
				g.t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			g.t.Fatal(err)
		}
	}
	g.git("add", "-A")
	g.git("commit", "--quiet", "--allow-empty", "-m", "change")
	return g.git("rev-parse", "HEAD")[:12]
}

const rolloutServiceEntry = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.mesh.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {name: grpc, number: 7070, protocol: GRPC}
  workloadSelector:
    labels: {app: echo}
`

func rolloutWorkloadEntry(name string, port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: default}
spec:
  address: 127.0.0.1
  ports: {grpc: %d}
  labels: {app: echo}
`, name, port)
}

// startEcho serves the echo service (a plain gRPC server) on a loopback
// port, answering with id.
func startEcho(t *testing.T, id string) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, &xdstest.Backend{ID: id})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().(*net.TCPAddr).Port
}

// TestStagedRolloutGRPC: ten grpc-go xDS clients, two of them canaries
// (label rollout=canary). A commit every client rejects (two endpoints with
// one address, which grpc-go NACKs) reaches only the canaries, is held and
// reported by SHA, and the canaries are back on the last good commit
// within the bake time + 1 s; a good commit reaches the canaries first and
// every client after the bake time; `rollout promote` sends a held commit
// to every client, `pin` brings every client back to a commit, `unpin`
// puts the latest commit through the rollout again.
func TestStagedRolloutGRPC(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git: %v", err)
	}
	const bake = 300 * time.Millisecond
	repo := &rolloutRepo{t: t, dir: t.TempDir()}
	repo.git("init", "--quiet", "--initial-branch=main")
	repo.git("config", "user.email", "t@vmesh.io")
	repo.git("config", "user.name", "t")
	port1, port2 := startEcho(t, "echo-1"), startEcho(t, "echo-2")
	good := repo.commit(map[string]string{"se.yaml": rolloutServiceEntry, "we1.yaml": rolloutWorkloadEntry("echo-1", port1)})

	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo = repo.dir
	cfg.Git.Ref = "main"
	cfg.Git.Interval = time.Hour // commits arrive by the webhook
	cfg.DebounceQuiet, cfg.DebounceMax = 10*time.Millisecond, 50*time.Millisecond
	cfg.Git.Rollout = &controlplane.RolloutConfig{Canary: controlplane.CanaryConfig{Selector: map[string]string{"rollout": "canary"}}, Bake: bake}
	cp := start(t, cfg)
	waitReady(t, cp)
	base := "http://" + cp.HTTPAddr()
	webhook := func() {
		t.Helper()
		resp, err := http.Post(base+"/webhook/git", "application/json", strings.NewReader(`{"ref":"refs/heads/main"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("webhook: %s", resp.Status)
		}
	}
	status := func() xds.RolloutStatus {
		t.Helper()
		var st xds.RolloutStatus
		code, body := get(t, base+"/debug/rollout")
		if code != http.StatusOK {
			t.Fatalf("/debug/rollout: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	post := func(action string) (int, string) {
		t.Helper()
		resp, err := http.Post(base+"/debug/rollout/"+action, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = fmt.Fprint(&b, resp.Status)
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		return resp.StatusCode, string(buf[:n])
	}
	syncz := func() map[string]xds.SyncStatus {
		t.Helper()
		var out []xds.SyncStatus
		code, body := get(t, base+"/debug/syncz")
		if code != http.StatusOK {
			t.Fatalf("/debug/syncz: %d", code)
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		m := map[string]xds.SyncStatus{}
		for _, s := range out {
			m[s.ID] = s
		}
		return m
	}
	// acked reports whether every client in ids ACKed EDS at commit.
	acked := func(ids []string, commit string) bool {
		sz := syncz()
		for _, id := range ids {
			e := sz[id].Types["EDS"]
			if e == nil || !strings.HasSuffix(e.Acked, "@"+commit) || e.Nack != "" {
				return false
			}
		}
		return true
	}
	// sentTo reports the clients in ids that were sent any type at commit.
	sentTo := func(sz map[string]xds.SyncStatus, ids []string, commit string) []string {
		var out []string
		for _, id := range ids {
			for _, ts := range sz[id].Types {
				if strings.HasSuffix(ts.Sent, "@"+commit) || strings.HasSuffix(ts.NackVersion, "@"+commit) || strings.HasSuffix(ts.Acked, "@"+commit) {
					out = append(out, id)
					break
				}
			}
		}
		return out
	}

	var all, canaries, rest []string
	clients := map[string]testpb.TestServiceClient{}
	for i := range 10 {
		id := fmt.Sprintf("client-%d", i)
		labels := map[string]string{"app": "client"}
		if i < 2 {
			labels["rollout"] = "canary"
			canaries = append(canaries, id)
		} else {
			rest = append(rest, id)
		}
		all = append(all, id)
		clients[id] = xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: id, Namespace: "default", Labels: labels}, "echo.mesh.internal:7070")
	}
	for id, c := range clients {
		if got := xdstest.CallUntil(t, c, 20*time.Second); got != "echo-1" {
			t.Fatalf("%s: answered by %s, want echo-1", id, got)
		}
	}
	xdstest.Eventually(t, "every client ACKs the first commit", func() bool { return acked(all, good) })
	if st := status(); st.Phase != xds.PhaseIdle || st.Good != good {
		t.Fatalf("rollout before any change: %+v, want idle at %s", st, good)
	}

	// A commit every client rejects: it reaches the canaries only, is
	// held, and the canaries return to the last good commit.
	bad := repo.commit(map[string]string{"we-dup.yaml": rolloutWorkloadEntry("echo-dup", port1)})
	webhook()
	var held xds.RolloutStatus
	xdstest.Eventually(t, "the bad commit held", func() bool {
		held = status()
		return held.Phase == xds.PhaseHeld && held.Candidate == bad
	})
	if !strings.Contains(held.Reason, "NACK from client-") || held.Good != good {
		t.Errorf("held: %+v, want a canary's NACK as the reason and %s still good", held, good)
	}
	xdstest.Eventually(t, "the canaries back on the last good commit", func() bool { return acked(canaries, good) })
	if took := time.Since(held.Since); took > bake+time.Second {
		t.Errorf("the canaries took %s after the hold to return to %s, want within the bake time + 1 s", took, good)
	}
	xdstest.Eventually(t, "both canaries rejected the bad commit", func() bool {
		return slices.Equal(status().Rejected, canaries)
	})
	if got := sentTo(syncz(), rest, bad); len(got) > 0 {
		t.Errorf("the bad commit reached %v, which are not canaries", got)
	}
	if _, metrics := get(t, base+"/metrics"); !strings.Contains(metrics, `vmesh_rollout_held{commit="`+bad+`"} 1`) {
		t.Errorf("metrics lack vmesh_rollout_held for %s", bad)
	}
	for id, c := range clients {
		if got := xdstest.CallUntil(t, c, 10*time.Second); got != "echo-1" {
			t.Errorf("%s after the hold: answered by %s", id, got)
		}
	}

	// A good commit: the canaries first, every client after the bake.
	next := repo.commit(map[string]string{"we-dup.yaml": "", "we2.yaml": rolloutWorkloadEntry("echo-2", port2)})
	webhook()
	var baking xds.RolloutStatus
	xdstest.Eventually(t, "the good commit baking or promoted", func() bool {
		baking = status()
		return baking.Candidate == next || baking.Good == next
	})
	for {
		st := status()
		if st.Phase == xds.PhaseIdle && st.Good == next {
			if d := time.Since(baking.Since); baking.Phase == xds.PhaseBaking && d < bake {
				t.Errorf("promoted %s after the candidate arrived, before the bake time %s", d, bake)
			}
			break
		}
		if st.Phase != xds.PhaseBaking || st.Candidate != next {
			t.Fatalf("good commit %s: %+v, want baking then idle", next, st)
		}
		if got := sentTo(syncz(), rest, next); len(got) > 0 {
			// Sent while the rollout says baking: the rollout may have
			// promoted in between; only a status still baking after
			// the look counts.
			if st2 := status(); st2.Phase == xds.PhaseBaking && st2.Candidate == next {
				t.Fatalf("the commit reached %v during its bake", got)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	xdstest.Eventually(t, "every client ACKs the promoted commit", func() bool { return acked(all, next) })

	// `rollout promote` sends a held commit to every client.
	bad2 := repo.commit(map[string]string{"we-dup.yaml": rolloutWorkloadEntry("echo-dup", port2)})
	webhook()
	xdstest.Eventually(t, "the second bad commit held", func() bool {
		st := status()
		return st.Phase == xds.PhaseHeld && st.Candidate == bad2
	})
	if code, body := post("promote"); code != http.StatusOK {
		t.Fatalf("promote: %d %s", code, body)
	}
	if st := status(); st.Phase != xds.PhaseIdle || st.Good != bad2 {
		t.Errorf("after promote: %+v, want idle at %s", st, bad2)
	}
	xdstest.Eventually(t, "the promoted commit reaches every client", func() bool { return len(sentTo(syncz(), all, bad2)) == len(all) })

	// `pin` brings every client back to a commit, whatever HEAD is.
	if code, body := post("pin?rev=" + next); code != http.StatusOK {
		t.Fatalf("pin: %d %s", code, body)
	}
	if st := status(); st.Phase != xds.PhasePinned || st.Good != next {
		t.Errorf("after pin: %+v, want pinned at %s", st, next)
	}
	xdstest.Eventually(t, "every client back on the pinned commit", func() bool { return acked(all, next) })
	if code, _ := post("pin?rev=no-such-rev"); code != http.StatusConflict {
		t.Errorf("pin of an unknown revision: %d, want 409", code)
	}
	// unpin: HEAD (the bad commit) goes through the rollout again, and
	// the canaries hold it.
	if code, body := post("unpin"); code != http.StatusOK {
		t.Fatalf("unpin: %d %s", code, body)
	}
	xdstest.Eventually(t, "HEAD held again after unpin", func() bool {
		st := status()
		return st.Phase == xds.PhaseHeld && st.Candidate == bad2 && st.Good == next
	})
	xdstest.Eventually(t, "every client on the pinned commit after the hold", func() bool { return acked(all, next) })
}

// TestStagedRolloutHoldsOnHealthRegression: an endpoint that turns
// unhealthy while a commit bakes holds the commit, named in the reason.
func TestStagedRolloutHoldsOnHealthRegression(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git: %v", err)
	}
	repo := &rolloutRepo{t: t, dir: t.TempDir()}
	repo.git("init", "--quiet", "--initial-branch=main")
	repo.git("config", "user.email", "t@vmesh.io")
	repo.git("config", "user.name", "t")
	checked := strings.Replace(rolloutWorkloadEntry("echo-1", 7001), "metadata: {name: echo-1, namespace: default}",
		"metadata:\n  name: echo-1\n  namespace: default\n  annotations: {proxy.istio.io/health-checks-enabled: \"true\"}", 1)
	good := repo.commit(map[string]string{"se.yaml": rolloutServiceEntry, "we1.yaml": checked})
	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo, cfg.Git.Ref, cfg.Git.Interval = repo.dir, "main", time.Hour
	cfg.DebounceQuiet, cfg.DebounceMax = 10*time.Millisecond, 50*time.Millisecond
	// A bake no test waits for: only the regression can end it.
	cfg.Git.Rollout = &controlplane.RolloutConfig{Canary: controlplane.CanaryConfig{Percent: 50}, Bake: time.Hour}
	cp := start(t, cfg)
	waitReady(t, cp)
	base := "http://" + cp.HTTPAddr()
	status := func() xds.RolloutStatus {
		t.Helper()
		var st xds.RolloutStatus
		if code, body := get(t, base+"/debug/rollout"); code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
			t.Fatalf("/debug/rollout: %d %s", code, body)
		}
		return st
	}
	healthy := true
	key := store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: "echo-1"}
	cp.Store().SetHealth(key, &healthy)
	next := repo.commit(map[string]string{"we2.yaml": rolloutWorkloadEntry("echo-2", 7002)})
	resp, err := http.Post(base+"/webhook/git", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	xdstest.Eventually(t, "the commit baking", func() bool {
		st := status()
		return st.Phase == xds.PhaseBaking && st.Candidate == next && st.Good == good
	})
	unhealthy := false
	cp.Store().SetHealth(key, &unhealthy)
	var st xds.RolloutStatus
	xdstest.Eventually(t, "the commit held", func() bool {
		st = status()
		return st.Phase == xds.PhaseHeld && st.Candidate == next
	})
	if st.Reason != "endpoint default/echo-1 turned unhealthy" || st.Good != good {
		t.Errorf("held: %+v, want the endpoint named and %s still good", st, good)
	}
}

// TestStagedRolloutSurvivesRestart: a restart starts from the last good
// commit the previous run remembered, and the branch's held commit goes
// through the rollout again instead of to every proxy.
func TestStagedRolloutSurvivesRestart(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git: %v", err)
	}
	repo := &rolloutRepo{t: t, dir: t.TempDir()}
	repo.git("init", "--quiet", "--initial-branch=main")
	repo.git("config", "user.email", "t@vmesh.io")
	repo.git("config", "user.name", "t")
	good := repo.commit(map[string]string{"se.yaml": rolloutServiceEntry, "we1.yaml": rolloutWorkloadEntry("echo-1", 7001)})
	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo, cfg.Git.Ref, cfg.Git.Interval = repo.dir, "main", time.Hour
	cfg.Git.Rollout = &controlplane.RolloutConfig{Canary: controlplane.CanaryConfig{Percent: 50}, Bake: time.Hour}
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	run := func() (*controlplane.ControlPlane, func()) {
		cp, err := controlplane.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cp.Run(ctx) }()
		stop := func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
		waitReady(t, cp)
		return cp, stop
	}
	status := func(cp *controlplane.ControlPlane) xds.RolloutStatus {
		t.Helper()
		var st xds.RolloutStatus
		if code, body := get(t, "http://"+cp.HTTPAddr()+"/debug/rollout"); code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
			t.Fatalf("/debug/rollout: %d %s", code, body)
		}
		return st
	}
	cp, stop := run()
	next := repo.commit(map[string]string{"we2.yaml": rolloutWorkloadEntry("echo-2", 7002)})
	resp, err := http.Post("http://"+cp.HTTPAddr()+"/webhook/git", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	xdstest.Eventually(t, "the commit baking", func() bool { return status(cp).Candidate == next })
	if code, body := func() (int, string) {
		resp, err := http.Post("http://"+cp.HTTPAddr()+"/debug/rollout/abort", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Status
	}(); code != http.StatusOK {
		t.Fatalf("abort: %s", body)
	}
	// The clone remembers the branch's commit as applied: a restart
	// serves it before any fetch.
	xdstest.Eventually(t, "the clone remembering the applied commit", func() bool {
		out, _ := exec.Command("git", "-C", filepath.Join(cfg.DataDir, "git"), "for-each-ref", "--format=%(objectname)", "refs/vmesh/good/").Output()
		return strings.HasPrefix(string(out), next)
	})
	stop()

	// The git source serves the branch's commit at once after the
	// restart; the rollout keeps the last good one for every proxy but
	// the canaries.
	cp, stop = run()
	defer stop()
	xdstest.Eventually(t, "the branch's commit applied after the restart", func() bool {
		return strings.HasPrefix(cp.Store().Snapshot().Commit(), next)
	})
	var st xds.RolloutStatus
	xdstest.Eventually(t, "the branch's commit baking again", func() bool {
		st = status(cp)
		return st.Candidate == next
	})
	if st.Good != good || st.Phase != xds.PhaseBaking {
		t.Errorf("after a restart: %+v, want %s good and %s baking again", st, good, next)
	}
}
