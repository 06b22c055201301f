package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/controlplane"
)

// TestServeConfigFileAndFlags: vmesh.yaml fills the defaults and flags given
// on the command line win; registries from both add up.
func TestServeConfigFileAndFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "vmesh.yaml")
	if err := os.WriteFile(file, []byte(`configDir: /etc/mesh
httpAddr: 10.0.0.1:15014
xdsAddr: 10.0.0.1:15010
debounceQuiet: 300ms
git: {ref: main}
ca: {trustDomain: corp.example}
registries:
- type: static
  static: {file: /etc/inventory.yaml}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var got controlplane.Config
	cmd := newServeCmdWith(func(_ context.Context, cfg controlplane.Config, _ *slog.Logger) error {
		got = cfg
		return nil
	})
	cmd.SetArgs([]string{"--config", file, "--http-addr", "127.0.0.1:9999", "--registry", "consul=127.0.0.1:8500"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.ConfigDir != "/etc/mesh" || got.XDSAddr != "10.0.0.1:15010" || got.DebounceQuiet != 300*time.Millisecond ||
		got.Git.Ref != "main" || got.CA.TrustDomain != "corp.example" {
		t.Errorf("values from the file lost: %+v", got)
	}
	if got.HTTPAddr != "127.0.0.1:9999" {
		t.Errorf("flag did not win: http addr %s", got.HTTPAddr)
	}
	if got.DebounceMax != time.Second || got.SecureAddr != "127.0.0.1:15012" {
		t.Errorf("defaults lost: %+v", got)
	}
	if len(got.Registries) != 2 || got.Registries[0].Type != "static" || got.Registries[1].Type != "consul" {
		t.Errorf("registries: %+v", got.Registries)
	}
}
