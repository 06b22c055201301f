package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/ca"
)

// vmesh ca revoke against a running control plane's data dir: the CA
// refuses a revoked token at once and keeps the others; revocations lists
// it.
func TestCARevokeTokenAndIdentity(t *testing.T) {
	cp, dataDir := servePlane(t, onboardingConfig, nil)
	mint := func() (token, id string) {
		t.Helper()
		stdout, stderr, err := execVMesh("token", "create", "--server", cp.HTTPAddr(), "--data-dir", dataDir, "--namespace", "demo", "--service-account", "web")
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(stderr, "vmesh ca revoke --token ")
		if !ok {
			t.Fatalf("token create names no token ID: %q", stderr)
		}
		return strings.TrimSpace(stdout), strings.TrimSuffix(strings.TrimSpace(rest), ")")
	}
	tok1, id1 := mint()
	tok2, _ := mint()
	if out, code := runVMesh(t, "ca", "revoke", "--data-dir", dataDir, "--token", id1, "--reason", "leaked in a log"); code != 0 || !strings.Contains(out, "revoked token "+id1) {
		t.Fatalf("ca revoke --token (exit %d): %s", code, out)
	}
	if _, err := cp.CA().VerifyToken(tok1); !errors.Is(err, ca.ErrTokenRevoked) || !strings.Contains(err.Error(), "leaked in a log") {
		t.Errorf("the server accepts the revoked token: %v", err)
	}
	if _, err := cp.CA().VerifyToken(tok2); err != nil {
		t.Errorf("the server refuses another token: %v", err)
	}
	if out, code := runVMesh(t, "ca", "revoke", "--data-dir", dataDir, "--identity", "spiffe://"+cp.CA().TrustDomain()+"/ns/demo/sa/web"); code != 0 {
		t.Fatalf("ca revoke --identity (exit %d): %s", code, out)
	}
	if _, err := cp.CA().VerifyToken(tok2); !errors.Is(err, ca.ErrTokenRevoked) {
		t.Errorf("a token of the revoked identity is accepted: %v", err)
	}
	var list []ca.Revocation
	out, code := runVMesh(t, "ca", "revocations", "--data-dir", dataDir, "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 {
		t.Fatalf("ca revocations -o json (exit %d, %v):\n%s", code, err, out)
	}
	if table, _ := runVMesh(t, "ca", "revocations", "--data-dir", dataDir); !strings.Contains(table, "token") || !strings.Contains(table, "identity") {
		t.Errorf("ca revocations:\n%s", table)
	}
	if _, _, err := execVMesh("ca", "revoke", "--data-dir", dataDir, "--token", "a", "--serial", "b"); err == nil {
		t.Error("two things at once accepted")
	}
}
