package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/controlplane"
)

// TestDemo runs the demo against vmesh serving a copy of the quickstart,
// then edits the VirtualService and checks the printed split follows.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"greeter.yaml", "workloads.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "config", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cp, err := controlplane.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	defer func() { cancel(); <-done }()

	demoCtx, stop := context.WithTimeout(ctx, 12*time.Second)
	defer stop()
	go func() {
		// After the split settles at 80/20, move everything to v2.
		time.Sleep(6 * time.Second)
		data, _ := os.ReadFile(filepath.Join(dir, "greeter.yaml"))
		edited := strings.Replace(strings.Replace(string(data), "weight: 80", "weight: 0", 1), "weight: 20", "weight: 100", 1)
		_ = os.WriteFile(filepath.Join(dir, "greeter.yaml"), []byte(edited), 0o644)
	}()
	var out bytes.Buffer
	splits, err := run(demoCtx, &out, cp.XDSAddr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	var sawEighty, sawAllV2 bool
	for _, s := range splits {
		total := s["v1"] + s["v2"]
		if total < 50 {
			continue
		}
		v1 := float64(s["v1"]) / float64(total)
		sawEighty = sawEighty || (v1 > 0.7 && v1 < 0.9)
		sawAllV2 = sawAllV2 || s["v1"] == 0
	}
	if !sawEighty || !sawAllV2 {
		t.Errorf("split did not show 80/20 and then all-v2:\n%s", out.String())
	}
}
