package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
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
jwksBlockedCIDRs: [169.254.0.0/16]
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
	if !slices.Equal(got.JWKSBlockedCIDRs, []string{"169.254.0.0/16"}) {
		t.Errorf("jwksBlockedCIDRs from the file: %v", got.JWKSBlockedCIDRs)
	}
	if got.DebounceMax != time.Second || got.SecureAddr != "127.0.0.1:15012" {
		t.Errorf("defaults lost: %+v", got)
	}
	if len(got.Registries) != 2 || got.Registries[0].Type != "static" || got.Registries[1].Type != "consul" {
		t.Errorf("registries: %+v", got.Registries)
	}
}

// TestServeLimitsAndAllowEmpty: the file limits, allowEmpty and the git
// timeout come from vmesh.yaml, flags win, and the rest keep the defaults.
func TestServeLimitsAndAllowEmpty(t *testing.T) {
	file := filepath.Join(t.TempDir(), "vmesh.yaml")
	if err := os.WriteFile(file, []byte("configDir: /etc/mesh\nmaxFileBytes: 1048576\nmaxProblems: 5\nallowEmpty: true\ngit: {timeout: 45s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got controlplane.Config
	cmd := newServeCmdWith(func(_ context.Context, cfg controlplane.Config, _ *slog.Logger) error {
		got = cfg
		return nil
	})
	cmd.SetArgs([]string{"--config", file, "--max-problems", "7", "--max-documents", "100"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.MaxFileBytes != 1<<20 || got.MaxProblems != 7 || got.MaxDocuments != 100 || !got.AllowEmpty || got.Git.Timeout != 45*time.Second {
		t.Errorf("limits: maxFileBytes %d, maxProblems %d, maxDocuments %d, allowEmpty %v, git timeout %s",
			got.MaxFileBytes, got.MaxProblems, got.MaxDocuments, got.AllowEmpty, got.Git.Timeout)
	}

	cmd = newServeCmdWith(func(_ context.Context, cfg controlplane.Config, _ *slog.Logger) error {
		got = cfg
		return nil
	})
	cmd.SetArgs([]string{"--config-dir", "/etc/mesh", "--allow-empty", "--git-timeout", "3s", "--jwks-blocked-cidr", "10.0.0.0/8", "--jwks-blocked-cidr", "127.0.0.0/8"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.MaxFileBytes != 4<<20 || got.MaxDocuments != 5000 || got.MaxProblems != 20 || !got.AllowEmpty || got.Git.Timeout != 3*time.Second {
		t.Errorf("defaults and flags: %+v", got)
	}
	if !slices.Equal(got.JWKSBlockedCIDRs, []string{"10.0.0.0/8", "127.0.0.0/8"}) {
		t.Errorf("--jwks-blocked-cidr: %v", got.JWKSBlockedCIDRs)
	}
	bad := controlplane.DefaultConfig()
	bad.ConfigDir, bad.MaxProblems = "/etc/mesh", 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "maxProblems 0") {
		t.Errorf("maxProblems 0 accepted: %v", err)
	}
}

// TestServePrometheusGraph: the graph's Prometheus comes from vmesh.yaml's
// prometheus key, --prometheus and --prometheus-window win, and a URL
// that is not http(s) is refused.
func TestServePrometheusGraph(t *testing.T) {
	file := filepath.Join(t.TempDir(), "vmesh.yaml")
	if err := os.WriteFile(file, []byte("configDir: /etc/mesh\nprometheus: {url: \"http://prom.internal:9090\", window: 30s, timeout: 2s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got controlplane.Config
	run := func(args ...string) {
		t.Helper()
		cmd := newServeCmdWith(func(_ context.Context, cfg controlplane.Config, _ *slog.Logger) error {
			got = cfg
			return nil
		})
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
	}
	run("--config", file)
	if got.Prometheus != (controlplane.PrometheusConfig{URL: "http://prom.internal:9090", Window: 30 * time.Second, Timeout: 2 * time.Second}) {
		t.Errorf("from vmesh.yaml: %+v", got.Prometheus)
	}
	run("--config", file, "--prometheus", "http://127.0.0.1:9090", "--prometheus-window", "5s")
	if got.Prometheus.URL != "http://127.0.0.1:9090" || got.Prometheus.Window != 5*time.Second || got.Prometheus.Timeout != 2*time.Second {
		t.Errorf("flags over vmesh.yaml: %+v", got.Prometheus)
	}
	bad := controlplane.DefaultConfig()
	bad.ConfigDir, bad.Prometheus.URL = "/etc/mesh", "prom.internal:9090"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "prometheus: url") {
		t.Errorf("a Prometheus URL without a scheme accepted: %v", err)
	}
}
