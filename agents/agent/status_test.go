package agent_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/agents/internal/agenttest"
)

// TestStatusPort: the agent's HTTP port (15020 in vmesh agent) says ready
// only while the probe passes, and says why not; /stats/prometheus lists
// every metric README.md documents, before any of them has an event;
// /debug/ndsz needs the DNS proxy.
func TestStatusPort(t *testing.T) {
	w := newApp(t)
	creds := t.TempDir()
	pair := agenttest.NewPair(t, "web.example.com", nil)
	for f, b := range map[string][]byte{"tls.crt": pair.Cert, "tls.key": pair.Key} {
		if err := os.MkdirAll(filepath.Join(creds, "web"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(creds, "web", f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := start(t, func(c *agent.Config) {
		c.StatusAddr = "127.0.0.1:0"
		c.CredentialsDir = creds
		c.Probe = &health.Probe{HTTP: &health.HTTPGet{Port: w.port(), Path: "/ready"}, Period: 50 * time.Millisecond, FailureThreshold: 1}
	})
	base := "http://" + r.agent.StatusAddr()
	c := &http.Client{Timeout: 5 * time.Second}
	readiness := func() (int, string) {
		code, body, err := get(c, base+"/healthz/ready")
		if err != nil {
			t.Fatal(err)
		}
		return code, body
	}
	until(t, 10*time.Second, "not ready while the probe fails", func() (bool, string) {
		code, body := readiness()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "readiness probe"), body
	})
	w.ready.Store(true)
	until(t, 10*time.Second, "ready once the probe passes", func() (bool, string) {
		code, body := readiness()
		return code == http.StatusOK, body
	})

	_, metrics, err := get(c, base+"/stats/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range documentedMetrics(t) {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m) + `(_bucket|_sum|_count)?[{ ]`).MatchString(metrics) {
			t.Errorf("/stats/prometheus lacks documented metric %s", m)
		}
	}
	if code, _, _ := get(c, base+"/debug/ndsz"); code != http.StatusNotFound {
		t.Errorf("/debug/ndsz without a DNS proxy: %d, want 404", code)
	}

	// The file credentials: named with their secrets, never their keys.
	until(t, 10*time.Second, "/debug/credentials lists web", func() (bool, string) {
		code, body, err := get(c, base+"/debug/credentials")
		if err != nil {
			t.Fatal(err)
		}
		var d agent.CredentialsDump
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			return false, body
		}
		if strings.Contains(body, "PRIVATE KEY") || strings.Contains(body, strings.TrimSpace(string(pair.Key))[40:80]) {
			t.Fatalf("/debug/credentials shows key material:\n%s", body)
		}
		return code == http.StatusOK && len(d.Credentials) == 1 && d.Credentials[0].Name == "web" &&
			slices.Contains(d.Credentials[0].Secrets, "kubernetes://web"), body
	})
}
