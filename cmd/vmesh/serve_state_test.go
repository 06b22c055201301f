package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// TestServeState: vmesh.yaml's state key and the --state and --replica-id
// flags, the flag winning; a bad value is refused before anything starts.
func TestServeState(t *testing.T) {
	file := filepath.Join(t.TempDir(), "vmesh.yaml")
	if err := os.WriteFile(file, []byte("configDir: /etc/mesh\nreplicaID: cp-1\nstate: {type: zookeeper, address: 'zk1:2181,zk2:2181', prefix: mesh, ttl: 4s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (controlplane.Config, error) {
		var got controlplane.Config
		cmd := newServeCmdWith(func(_ context.Context, cfg controlplane.Config, _ *slog.Logger) error {
			got = cfg
			return cfg.Validate()
		})
		cmd.SetArgs(args)
		cmd.SetErr(&strings.Builder{})
		return got, cmd.Execute()
	}
	got, err := run("--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if s := got.State; s == nil || s.Type != "zookeeper" || s.Address != "zk1:2181,zk2:2181" || s.Prefix != "mesh" || s.TTL != 4*time.Second || got.ReplicaID != "cp-1" {
		t.Fatalf("state from vmesh.yaml: %+v, replica %q", got.State, got.ReplicaID)
	}
	got, err = run("--config", file, "--state", "consul=127.0.0.1:8500", "--replica-id", "cp-2")
	if err != nil {
		t.Fatal(err)
	}
	if s := got.State; s == nil || s.Type != "consul" || s.Address != "127.0.0.1:8500" || got.ReplicaID != "cp-2" {
		t.Fatalf("--state did not win: %+v, replica %q", got.State, got.ReplicaID)
	}
	if got, err := run("--config-dir", "/etc/mesh"); err != nil || got.State != nil {
		t.Fatalf("no state configured: %+v %v", got.State, err)
	}
	if _, err := run("--config-dir", "/etc/mesh", "--state", "etcd=x:1"); err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Fatalf("--state etcd=: %v", err)
	}
	if _, err := run("--config-dir", "/etc/mesh", "--state", "consul=x:1", "--replica-id", "a/b"); err == nil || !strings.Contains(err.Error(), "replicaID") {
		t.Fatalf("--replica-id a/b: %v", err)
	}
}
