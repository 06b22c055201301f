package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/registries"
)

// chromiumPath returns Debian's chromium, or fails (CI=true) or skips the
// test when it is not installed.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	testenv.Missing(t, "chromium not found at /usr/bin/chromium or on PATH")
	return ""
}

// browser starts headless chromium with a fresh profile and returns a
// context of one tab in it. The flags keep it off the network: on a closed
// network its background connections would fail or hang.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first Run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// do runs browser steps within d.
func do(t *testing.T, ctx context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// text returns the rendered text of the first element matching a CSS
// selector, read in one evaluation (the live script may swap the element).
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	q, _ := json.Marshal(sel)
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(c, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%s) || {innerText: ""}).innerText`, q)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// waitText waits, within d, until the element's text holds every want.
func waitText(t *testing.T, ctx context.Context, d time.Duration, sel string, want ...string) {
	t.Helper()
	q, _ := json.Marshal(sel)
	w, _ := json.Marshal(want)
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && %s.every(w => e.innerText.includes(w)); })()`, q, w)
	if _, err := chromedp.Run(c, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(d))); err != nil {
		t.Fatalf("waiting %s for %s to show %q: %v; it shows:\n%s", d, sel, want, err, text(t, ctx, sel))
	}
}

// live waits until the page's event stream is open.
func live(t *testing.T, ctx context.Context) {
	t.Helper()
	do(t, ctx, 10*time.Second, "event stream open", chromedp.WaitVisible(chromedp.CSS(`body[data-live="open"]`)))
}

// artifacts is where the screenshots go: $VMESH_ARTIFACTS/console, else a
// temporary directory.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("VMESH_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot saves the whole page as NAME.png.
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// startPlane runs a control plane over dir and the registries until the
// test ends.
func startPlane(t *testing.T, dir string, regs ...string) *controlplane.ControlPlane {
	t.Helper()
	specs, err := registries.ParseFlags(regs)
	if err != nil {
		t.Fatal(err)
	}
	return startPlaneWith(t, func(cfg *controlplane.Config) { cfg.ConfigDir, cfg.Registries = dir, specs })
}

// startPlaneWith runs a control plane configured by edit on kernel-chosen
// ports until the test ends.
func startPlaneWith(t *testing.T, edit func(*controlplane.Config)) *controlplane.ControlPlane {
	t.Helper()
	cfg := controlplane.DefaultConfig()
	edit(&cfg)
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cp, err := controlplane.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("control plane: %v", err)
		}
	})
	eventually(t, 15*time.Second, "control plane ready", cp.Ready)
	return cp
}

// eventually waits until cond holds, checking every 20 ms, for at most d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("%s: not within %s", what, d)
		case <-tick.C:
		}
	}
}

// writeFile writes a config file atomically (temp file, then rename), as
// an editor does.
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(strings.TrimLeft(content, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}
