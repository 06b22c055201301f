package controlplane_test

import (
	"encoding/json"
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
// metrics the server registers, /metrics exposes every one of them from the
// start, and nothing else.
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
	// Every documented metric is there from the start, at zero when
	// nothing happened yet, so dashboards and alerts see it.
	if missing := minus(documented, exposed); len(missing) > 0 {
		t.Errorf("/metrics lacks documented metrics at start: %v", missing)
	}
	checkMetricRefs(t, "the README's Istio name mapping", istioMapping(t, string(data)), registered)
	checkMetricRefs(t, "examples/grafana/vmesh-dashboard.json", dashboardMetrics(t, "../../../examples/grafana/vmesh-dashboard.json"), registered)
}

var metricRefRE = regexp.MustCompile(`vmesh_[a-z0-9_]+`)

// checkMetricRefs fails for every metric refs name that the server does
// not register (a histogram's _bucket, _sum and _count series count as the
// histogram).
func checkMetricRefs(t *testing.T, where string, refs, registered []string) {
	t.Helper()
	if len(refs) == 0 {
		t.Errorf("%s names no vmesh metric", where)
	}
	for _, r := range refs {
		base := r
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(r, suffix); ok && slices.Contains(registered, b) {
				base = b
			}
		}
		if !slices.Contains(registered, base) {
			t.Errorf("%s queries %s, which the server does not register", where, r)
		}
	}
}

// istioMapping returns the vmesh metrics of the README's table of Istio
// equivalents.
func istioMapping(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "<!-- istio-names:begin -->")
	section, _, ok2 := strings.Cut(section, "<!-- istio-names:end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- istio-names:begin --> ... <!-- istio-names:end --> section")
	}
	return metricRefRE.FindAllString(section, -1)
}

// dashboardMetrics returns every metric the dashboard's panels query, and
// checks each panel has a query.
func dashboardMetrics(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", path, p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, metricRefRE.FindAllString(tg.Expr, -1)...)
		}
	}
	return out
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
