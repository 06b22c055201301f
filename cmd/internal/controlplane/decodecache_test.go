package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/testenv"
)

// TestRestartServesFromTheDecodeCache: once ready, the control plane saves
// what its files decoded to in the data directory; a restart on the same
// files serves the same config without decoding any of them.
func TestRestartServesFromTheDecodeCache(t *testing.T) {
	data := t.TempDir()
	run := func() (config json.RawMessage, log string) {
		t.Helper()
		cfg := controlplane.DefaultConfig()
		cfg.ConfigDir = "../../../examples/quickstart"
		cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", data
		var logs testenv.LogBuffer
		cp, err := controlplane.New(cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cp.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}()
		waitReady(t, cp)
		saved := regexp.MustCompile(`decode cache saved" hits=\d+ misses=\d+`)
		deadline := time.Now().Add(15 * time.Second)
		for !saved.MatchString(logs.String()) {
			if time.Now().After(deadline) {
				t.Fatalf("decode cache never saved:\n%s", logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, body := get(t, "http://"+cp.HTTPAddr()+"/debug/config")
		var dc struct {
			Objects  json.RawMessage `json:"objects"`
			Warnings json.RawMessage `json:"warnings"`
		}
		if err := json.Unmarshal([]byte(body), &dc); err != nil {
			t.Fatal(err)
		}
		return append(dc.Objects, dc.Warnings...), saved.FindString(logs.String())
	}
	first, log := run()
	if log != `decode cache saved" hits=0 misses=2` {
		t.Errorf("first start: %q", log)
	}
	if info, err := os.Stat(filepath.Join(data, "decode-cache", "dir")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("decode cache file: %v %v", info, err)
	}
	second, log := run()
	if log != `decode cache saved" hits=2 misses=0` {
		t.Errorf("restart: %q, want every file from the cache", log)
	}
	if len(first) < 100 || !bytes.Equal(first, second) {
		t.Errorf("restart serves other config:\n%s\nfirst start:\n%s", second, first)
	}
}
