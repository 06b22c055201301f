package console_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/xdstest"
)

const echoYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.console.internal]
  location: MESH_INTERNAL
  ports: [{number: 50051, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-route, namespace: default}
spec:
  hosts: [echo.console.internal]
  http:
  - route:
    - destination: {host: echo.console.internal, port: {number: 50051}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo-policy, namespace: default}
spec:
  host: echo.console.internal
  trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}
`

// Two WorkloadEntries with one address:port: valid Istio config that
// grpc-go rejects (an EDS resource with duplicate endpoints).
const dupYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: dup, namespace: default}
spec:
  hosts: [dup.console.internal]
  location: MESH_INTERNAL
  ports: [{number: 50051, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: dup}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: dup-1, namespace: default}
spec: {address: 127.0.0.1, ports: {grpc: 1}, labels: {app: dup}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: dup-2, namespace: default}
spec: {address: 127.0.0.1, ports: {grpc: 1}, labels: {app: dup}}
`

// inventoryYAML is a static registry's inventory: one service.
const inventoryYAML = `
services:
- name: billing
  host: billing.internal
  port: 8080
  protocol: grpc
  instances:
  - address: 10.0.0.1
`

// brokenYAML fails validation on its line 10.
const brokenYAML = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: broken, namespace: default}
spec:
  hosts: [echo.console.internal]
  http:
  - route:
    - destination: {host: echo.console.internal}
      weight: 100
    timeout: forever
`

// TestConsoleInBrowser runs a control plane with real grpc-go proxies
// (an xDS server, a client that calls it, a client that NACKs) and reads
// every console page in headless chromium: the proxies with SYNCED and the
// NACK message, search, one proxy's config, the services, the change
// history, and a broken file's file:line shown live within 2 s.
func TestConsoleInBrowser(t *testing.T) {
	start := time.Now()
	ctx := browser(t)
	shots := artifacts(t)
	dir := t.TempDir()
	writeFile(t, dir, "echo.yaml", echoYAML)
	writeFile(t, dir, "dup.yaml", dupYAML)
	inventory := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inventory, []byte(inventoryYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cp := startPlane(t, dir, "static="+inventory)
	ui := "http://" + cp.HTTPAddr() + "/ui/"

	b1 := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: "echo-b1", Namespace: "default"})
	writeFile(t, dir, "echo.yaml", echoYAML+fmt.Sprintf(`---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-b1, namespace: default}
spec: {address: 127.0.0.1, ports: {grpc: %d}, labels: {app: echo}}
`, b1.Port))
	client := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "client", Namespace: "default", ServiceAccount: "teller"}, "echo.console.internal:50051")
	if got := xdstest.CallUntil(t, client, 20*time.Second); got != "echo-b1" {
		t.Fatalf("call answered by %q, want echo-b1", got)
	}
	nacker := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "nacker", Namespace: "default"}, "dup.console.internal:50051")
	callCtx, stopCall := context.WithCancel(context.Background())
	t.Cleanup(stopCall)
	go func() { _, _ = nacker.UnaryCall(callCtx, &testpb.SimpleRequest{}) }() // starts its watches; cannot succeed
	t.Logf("mesh up in %s", time.Since(start).Round(time.Millisecond))

	// Proxies: every connected proxy, SYNCED, and the NACK with its
	// message, reached through live updates only (no reload).
	do(t, ctx, 10*time.Second, "open proxies", chromedp.Navigate(ui+"proxies"))
	live(t, ctx)
	do(t, ctx, 10*time.Second, "proxies synced and the NACK",
		chromedp.WaitVisible(chromedp.CSS(`tr.proxy[data-id="client"][data-state="SYNCED"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr.proxy[data-id="echo-b1"][data-state="SYNCED"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr.proxy[data-id="nacker"][data-state="NACK"]`)))
	table := text(t, ctx, "#proxies")
	for _, want := range []string{"client", "echo-b1", "nacker", "SYNCED", "NACK", "duplicate endpoint", "spiffe://cluster.local/ns/default/sa/teller"} {
		if !strings.Contains(table, want) {
			t.Errorf("proxies page lacks %q:\n%s", want, table)
		}
	}
	if got := text(t, ctx, "#connected"); got != "3" {
		t.Errorf("proxies page says %s connected, want 3", got)
	}
	screenshot(t, ctx, shots, "proxies")

	// Search, through the search box.
	do(t, ctx, 10*time.Second, "search for the NACK",
		chromedp.SetValue(chromedp.CSS("#q"), "duplicate"),
		chromedp.Click(chromedp.CSS("#search")),
		chromedp.WaitVisible(chromedp.CSS(`input#q[value="duplicate"]`)))
	live(t, ctx)
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr.proxy")].map(r => r.dataset.id)`))
	if err != nil || len(rows) != 1 || rows[0] != "nacker" {
		t.Errorf("searching 'duplicate' shows %v (%v), want [nacker]", rows, err)
	}
	screenshot(t, ctx, shots, "proxies-search")

	// One proxy: its identity, its sync state with the NACK, its config.
	// Clicked from script in one step: a live refresh may swap the row.
	do(t, ctx, 10*time.Second, "open the nacker",
		chromedp.Evaluate[chromedp.Void](`document.querySelector('tr.proxy[data-id="nacker"] a').click()`),
		chromedp.WaitVisible(chromedp.CSS("#proxy-id")))
	waitText(t, ctx, 5*time.Second, "#data", "nacker", "EDS", "NACK", "duplicate endpoint", "dup.console.internal")
	screenshot(t, ctx, shots, "proxy-nacker")
	do(t, ctx, 10*time.Second, "open the client", chromedp.Navigate(ui+"proxy?id=client"))
	waitText(t, ctx, 5*time.Second, "#data", "client", "grpc", "SYNCED", "LDS", "echo.console.internal:50051", "CDS", "EDS")
	screenshot(t, ctx, shots, "proxy-client")

	// Services: hosts, ports, endpoints with health and origin, the
	// VirtualService and DestinationRule that apply.
	do(t, ctx, 10*time.Second, "open services", chromedp.Navigate(ui+"services"))
	waitText(t, ctx, 5*time.Second, "#data", "echo.console.internal", "grpc 50051/GRPC", fmt.Sprintf("grpc:%d", b1.Port),
		"default/echo-b1", "NO CHECKS", "echo.yaml:", "default/echo-route", "default/echo-policy", "dup.console.internal", "default/dup-2",
		"billing.internal", "10.0.0.1", "registry:static")
	screenshot(t, ctx, shots, "services")

	// Changes: what each revision changed, with where it is defined.
	do(t, ctx, 10*time.Second, "open changes", chromedp.Navigate(ui+"changes"))
	waitText(t, ctx, 5*time.Second, "#data", "revision", "+ WorkloadEntry/default/echo-b1", "echo.yaml:")
	screenshot(t, ctx, shots, "changes")

	// Overview, then a broken file: its file:line appears within 2 s,
	// pushed to the open page.
	do(t, ctx, 10*time.Second, "open overview", chromedp.Navigate(ui))
	live(t, ctx)
	waitText(t, ctx, 5*time.Second, "#data", "No config errors", "dir:", "ServiceEntry")
	waitText(t, ctx, 5*time.Second, "#registries", "static", inventory, "yes", "ago")
	if got := text(t, ctx, "#proxy-count"); got != "3" {
		t.Errorf("overview counts %s proxies, want 3", got)
	}
	screenshot(t, ctx, shots, "overview")
	refreshes := func() string {
		s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.refreshes || "0"`))
		return s
	}
	before := refreshes()
	wrote := time.Now()
	writeFile(t, dir, "broken.yaml", brokenYAML)
	waitText(t, ctx, 2*time.Second, "#errors", "broken.yaml:10", "VirtualService/default/broken", "http[0].timeout", `invalid duration "forever"`)
	t.Logf("broken.yaml:10 shown %s after the write", time.Since(wrote).Round(time.Millisecond))
	if after := refreshes(); after == before {
		t.Errorf("the error appeared without a live refresh (refreshes %s -> %s)", before, after)
	}
	screenshot(t, ctx, shots, "overview-error")

	// A WasmPlugin object (an Istio kind vmesh does not implement) applies
	// and is a warning beside the errors, with its file:line and code.
	writeFile(t, dir, "wasm.yaml", "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: logs, namespace: default}\nspec: {url: oci://example.internal/f:1}\n")
	waitText(t, ctx, 2*time.Second, "#warnings", "wasm.yaml:2", "WasmPlugin/default/logs", "VM1001", "does not implement")
	screenshot(t, ctx, shots, "overview-warning")
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// TestConsoleShowsRejectedCommit: with a git source, a pushed commit that
// fails validation shows on the open overview, by its SHA and file:line,
// within 2 s of the push (the webhook), while the last good commit serves.
func TestConsoleShowsRejectedCommit(t *testing.T) {
	ctx := browser(t)
	shots := artifacts(t)
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "--quiet", "--initial-branch=main")
	git("config", "user.email", "t@vmesh.io")
	git("config", "user.name", "t")
	if err := os.MkdirAll(filepath.Join(repo, "mesh"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(repo, "mesh"), "echo.yaml", echoYAML)
	git("add", "-A")
	git("commit", "--quiet", "-m", "echo")
	good := git("rev-parse", "HEAD")
	cp := startPlaneWith(t, func(cfg *controlplane.Config) {
		cfg.Git.Repo, cfg.Git.Ref, cfg.Git.Path, cfg.Git.Interval = repo, "main", "mesh", time.Hour
	})
	ui := "http://" + cp.HTTPAddr() + "/ui/"

	do(t, ctx, 10*time.Second, "open overview", chromedp.Navigate(ui))
	live(t, ctx)
	waitText(t, ctx, 5*time.Second, "#data", "No config errors", good[:12])

	writeFile(t, filepath.Join(repo, "mesh"), "broken.yaml", brokenYAML)
	git("add", "-A")
	git("commit", "--quiet", "-m", "broken")
	bad := git("rev-parse", "HEAD")
	pushed := time.Now()
	resp, err := http.Post("http://"+cp.HTTPAddr()+"/webhook/git", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitText(t, ctx, 2*time.Second, "#errors", bad[:12]+":mesh/broken.yaml:10", "http[0].timeout", "commit "+bad[:12]+" rejected; still serving "+good[:12])
	t.Logf("the rejected commit %.12s shown %s after the push", bad, time.Since(pushed).Round(time.Millisecond))
	if got := cp.Store().Snapshot().Commit(); got != good {
		t.Errorf("serving %q after the rejected commit, want the last good %s", got, good)
	}
	screenshot(t, ctx, shots, "overview-rejected-commit")
}
