package controlplane_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	zkpkg "github.com/go-zookeeper/zk"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/registries"
	"github.com/vmesh/vmesh/store"
)

func start(t *testing.T, cfg controlplane.Config) *controlplane.ControlPlane {
	t.Helper()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.XDSAddr = "127.0.0.1:0"
	cfg.SecureAddr = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cp, err := controlplane.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return cp
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitReady(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if code, _ := get(t, "http://"+cp.HTTPAddr()+"/ready"); code == http.StatusOK {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("never ready")
}

func TestServeQuickstart(t *testing.T) {
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = "../../../examples/quickstart"
	cp := start(t, cfg)
	waitReady(t, cp)

	_, body := get(t, "http://"+cp.HTTPAddr()+"/debug/config")
	var dc filestore.DebugConfig
	if err := json.Unmarshal([]byte(body), &dc); err != nil {
		t.Fatal(err)
	}
	if len(dc.Objects) != 6 || dc.Revision != 1 || len(dc.Sources) != 1 {
		t.Fatalf("debug config: %d objects rev %d sources %v", len(dc.Objects), dc.Revision, dc.Sources)
	}
	var sawVS bool
	for _, o := range dc.Objects {
		if o.Kind == store.KindVirtualService && o.Origin.File == filepath.Join("config", "greeter.yaml") && o.Origin.Line > 1 {
			var spec struct {
				HTTP []struct {
					Route []struct{ Weight int } `json:"route"`
				} `json:"http"`
			}
			if err := json.Unmarshal(o.Spec, &spec); err != nil {
				t.Fatal(err)
			}
			sawVS = len(spec.HTTP) == 2 && spec.HTTP[1].Route[0].Weight == 80
		}
	}
	if !sawVS {
		t.Errorf("VirtualService with origin and spec missing from /debug/config:\n%s", body)
	}
	_, metrics := get(t, "http://"+cp.HTTPAddr()+"/metrics")
	for _, m := range []string{"vmesh_config_revision 1", "vmesh_config_objects{source=", "vmesh_config_errors{source="} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
	if code, _ := get(t, "http://"+cp.HTTPAddr()+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof served without --pprof: %d", code)
	}
}

func TestServeGitWebhook(t *testing.T) {
	repo := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name, addr string) {
		doc := "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: " + name + "}\nspec: {address: " + addr + "}\n"
		if err := os.WriteFile(filepath.Join(repo, name+".yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "-A")
		git("commit", "--quiet", "-m", name)
	}
	git("init", "--quiet", "--initial-branch=main")
	git("config", "user.email", "t@vmesh.io")
	git("config", "user.name", "t")
	write("a", "1.1.1.1")

	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo = repo
	cfg.Git.Ref = "main"
	cfg.Git.Interval = time.Hour // only the webhook can bring the next commit in time
	// The secret comes from a file (the command line never carries it);
	// its trailing newline is not part of it.
	cfg.Git.WebhookSecretFile = filepath.Join(t.TempDir(), "webhook-secret")
	if err := os.WriteFile(cfg.Git.WebhookSecretFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp := start(t, cfg)
	waitReady(t, cp)
	write("b", "2.2.2.2")

	post := func(sig string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+cp.HTTPAddr()+"/webhook/git", strings.NewReader(`{"ref":"refs/heads/main"}`))
		if sig != "" {
			req.Header.Set("X-Hub-Signature-256", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("sha256=00"); code != http.StatusUnauthorized {
		t.Fatalf("bad signature accepted: %d", code)
	}
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte(`{"ref":"refs/heads/main"}`))
	if code := post("sha256=" + hex.EncodeToString(mac.Sum(nil))); code != http.StatusAccepted {
		t.Fatalf("webhook: %d", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for cp.Store().Snapshot().Len() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("webhook did not bring the new commit")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConfigFileUnknownKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "vmesh.yaml")
	if err := os.WriteFile(p, []byte("configDir: x\nxdsAdress: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	err := controlplane.LoadConfigFile(p, &cfg)
	if err == nil || !strings.Contains(err.Error(), "xdsAdress") {
		t.Fatalf("unknown key not reported: %v", err)
	}
}

func TestServeStaticRegistryFromFlagSpec(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte("services:\n- name: billing\n  host: billing.internal\n  port: 8080\n  protocol: grpc\n  instances:\n  - address: 10.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := registries.ParseFlags([]string{"static=" + inv})
	if err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.Registries = specs
	cp := start(t, cfg)
	deadline := time.Now().Add(10 * time.Second)
	for cp.Store().Snapshot().Len() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("static registry objects never reached the Store")
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, body := get(t, "http://"+cp.HTTPAddr()+"/debug/registries")
	if code != http.StatusOK || !strings.Contains(body, "static") {
		t.Fatalf("/debug/registries: %d %s", code, body)
	}
	_, body = get(t, "http://"+cp.HTTPAddr()+"/debug/config")
	if !strings.Contains(body, "billing.internal") || !strings.Contains(body, "vmesh.io/registry") {
		t.Fatalf("generated objects not in /debug/config:\n%.1500s", body)
	}
	_, metrics := get(t, "http://"+cp.HTTPAddr()+"/metrics")
	if !strings.Contains(metrics, "vmesh_registries_objects") {
		t.Error("registry metrics missing")
	}
}

// TestReadyWaitsForRegistries checks that xDS and /ready wait for a
// registry's first complete set (a proxy connecting at start must not be
// told its Dubbo services do not exist), and that a registry that is down
// delays them by RegistrySyncWait at most.
func TestReadyWaitsForRegistries(t *testing.T) {
	zk := testenv.StartZooKeeper(t)
	conn, events, err := zkpkg.Connect([]string{zk.Addr}, 10*time.Second, zkpkg.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for ev := range events {
		if ev.State == zkpkg.StateHasSession {
			break
		}
	}
	root := fmt.Sprintf("/ready-%d", time.Now().UnixNano())
	iface := "org.vmesh.ready.Greeter"
	for _, p := range []string{root, root + "/" + iface, root + "/" + iface + "/providers"} {
		if _, err := conn.Create(p, nil, 0, zkpkg.WorldACL(zkpkg.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		u := url.QueryEscape(fmt.Sprintf("dubbo://10.9.0.%d:20880/%s?interface=%s&application=greeter&side=provider", i+1, iface, iface))
		if _, err := conn.Create(root+"/"+iface+"/providers/"+u, nil, 0, zkpkg.WorldACL(zkpkg.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	specs, err := registries.ParseFlags([]string{"zookeeper=" + zk.Addr})
	if err != nil {
		t.Fatal(err)
	}
	specs[0].ZooKeeper.Root = strings.TrimPrefix(root, "/")
	cfg.Registries = specs
	cp := start(t, cfg)
	waitReady(t, cp)
	wes := len(cp.Store().Snapshot().List(store.KindWorkloadEntry))
	if wes != 3 {
		t.Fatalf("ready with %d of the registry's 3 WorkloadEntries in the Store", wes)
	}

	// A registry nobody answers for: ready once RegistrySyncWait passes.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	cfg = controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.RegistrySyncWait = 300 * time.Millisecond
	if cfg.Registries, err = registries.ParseFlags([]string{"zookeeper=" + dead}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, start(t, cfg))
}
