package controlplane_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/registries"
)

var readmeMetricRE = regexp.MustCompile("^\\| `(vmesh_[a-z0-9_]+)`")

// TestREADMEMetricsMatchServer: the README's metric table lists exactly the
// metrics the server registers, and everything /metrics exposes is in it.
func TestREADMEMetricsMatchServer(t *testing.T) {
	data, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "<!-- metrics:begin -->")
	section, _, ok2 := strings.Cut(section, "<!-- metrics:end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- metrics:begin --> ... <!-- metrics:end --> section")
	}
	var documented []string
	for _, line := range strings.Split(section, "\n") {
		if m := readmeMetricRE.FindStringSubmatch(line); m != nil {
			documented = append(documented, m[1])
		}
	}
	slices.Sort(documented)

	inv := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte("services: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := registries.ParseFlags([]string{"static=" + inv}) // registries register their metrics too
	if err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = "../../../examples/quickstart"
	cfg.Registries = specs
	cp := start(t, cfg)
	waitReady(t, cp)
	registered := cp.MetricNames()
	if !slices.Equal(documented, registered) {
		t.Errorf("README metrics differ from the server's.\nundocumented: %v\nno longer registered: %v",
			minus(registered, documented), minus(documented, registered))
	}
	_, body := get(t, "http://"+cp.HTTPAddr()+"/metrics")
	var exposed []string
	for _, line := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE vmesh_"); ok {
			exposed = append(exposed, "vmesh_"+strings.Fields(name)[0])
		}
	}
	if len(exposed) == 0 {
		t.Fatal("/metrics exposes no vmesh metric")
	}
	if extra := minus(exposed, documented); len(extra) > 0 {
		t.Errorf("/metrics exposes undocumented metrics: %v", extra)
	}
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
