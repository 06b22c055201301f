package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// TestFaultServeRefusesGitPasswordInArgv: `vmesh serve --git-repo
// https://user:pass@host/repo` would show the password to every local user
// in /proc/PID/cmdline: it is refused before anything runs, with the way
// out. The same URL in the config file (not in argv) is accepted: the git
// source keeps the password off git's command line (filestore's
// TestFaultGitPasswordNotInArgv).
// TestFaultServeRefusesWebhookSecretInArgv: the webhook's HMAC secret is a
// credential, so the command line takes only a file holding it.
func TestFaultServeRefusesWebhookSecretInArgv(t *testing.T) {
	ran := false
	cmd := newServeCmdWith(func(context.Context, controlplane.Config, *slog.Logger) error { ran = true; return nil })
	cmd.SetArgs([]string{"--config-dir", t.TempDir(), "--git-webhook-secret", "hunter2"})
	err := cmd.Execute()
	if err == nil || ran {
		t.Fatalf("--git-webhook-secret on the command line: ran %v, error %v", ran, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "--git-webhook-secret-file") || strings.Contains(msg, "hunter2") {
		t.Errorf("error %q: want the way out, and not the secret", msg)
	}
	file := filepath.Join(t.TempDir(), "secret")
	var got controlplane.Config
	cmd = newServeCmdWith(func(_ context.Context, cfg controlplane.Config, _ *slog.Logger) error { got = cfg; return nil })
	cmd.SetArgs([]string{"--config-dir", t.TempDir(), "--git-webhook-secret-file", file})
	if err := cmd.Execute(); err != nil || got.Git.WebhookSecretFile != file || got.Git.WebhookSecret != "" {
		t.Errorf("--git-webhook-secret-file: %v, file %q, secret %q", err, got.Git.WebhookSecretFile, got.Git.WebhookSecret)
	}
}

func TestFaultServeRefusesGitPasswordInArgv(t *testing.T) {
	const url = "https://ci-bot:hunter2@git.example.com/mesh.git"
	ran := false
	cmd := newServeCmdWith(func(context.Context, controlplane.Config, *slog.Logger) error { ran = true; return nil })
	cmd.SetArgs([]string{"--git-repo", url})
	err := cmd.Execute()
	if err == nil || ran {
		t.Fatalf("a password in --git-repo: ran %v, error %v", ran, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "--git-token-file") || strings.Contains(msg, "hunter2") {
		t.Errorf("error %q: want the way out, and not the password", msg)
	}
	for _, ok := range []string{"https://ci-bot@git.example.com/mesh.git", "git@git.example.com:mesh.git", "/srv/mesh"} {
		cmd := newServeCmdWith(func(context.Context, controlplane.Config, *slog.Logger) error { return nil })
		cmd.SetArgs([]string{"--git-repo", ok})
		if err := cmd.Execute(); err != nil {
			t.Errorf("--git-repo %s: %v", ok, err)
		}
	}
	file := filepath.Join(t.TempDir(), "vmesh.yaml")
	if err := os.WriteFile(file, []byte("git: {repo: \""+url+"\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got controlplane.Config
	cmd = newServeCmdWith(func(_ context.Context, cfg controlplane.Config, _ *slog.Logger) error { got = cfg; return nil })
	cmd.SetArgs([]string{"--config", file})
	if err := cmd.Execute(); err != nil || got.Git.Repo != url {
		t.Errorf("the URL from the config file: %v, repo %q", err, got.Git.Repo)
	}
}

// The vmesh commands that call the HTTP port send its token: from
// --token-file, $VMESH_TOKEN_FILE or $VMESH_TOKEN; without it they fail
// with the server's 401 and its hint.
func TestCommandsSendHTTPToken(t *testing.T) {
	t.Setenv(tokenFileEnv, "")
	t.Setenv(tokenEnv, "")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("cli-token-7d2a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, _ := servePlane(t, onboardingConfig, func(c *controlplane.Config) { c.HTTP.TokenFile = tokenFile })

	out, stderr, err := execVMesh("status", "--server", cp.HTTPAddr())
	if err == nil || !strings.Contains(out+stderr, "401") {
		t.Errorf("status without the token: %v\n%s%s", err, out, stderr)
	}
	if _, _, err := execVMesh("status", "--server", cp.HTTPAddr(), "--token-file", tokenFile); err != nil {
		t.Errorf("status --token-file: %v", err)
	}
	t.Setenv(tokenFileEnv, "")
	t.Setenv(tokenEnv, "cli-token-7d2a")
	if _, _, err := execVMesh("status", "--server", cp.HTTPAddr()); err != nil {
		t.Errorf("status with $VMESH_TOKEN: %v", err)
	}
	if _, _, err := execVMesh("config-dump", "--server", cp.HTTPAddr(), "no-such-proxy"); err == nil || strings.Contains(err.Error(), "401") {
		t.Errorf("config-dump with $VMESH_TOKEN: %v, want the proxy's 404, not 401", err)
	}
}
