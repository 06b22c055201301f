package filestore_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

func meshOf(t *testing.T, s *store.Snapshot) *meshv1alpha1.MeshConfig {
	t.Helper()
	o := s.Get(store.MeshConfigKey)
	if o == nil {
		return nil
	}
	return o.Spec.(*meshv1alpha1.MeshConfig)
}

// TestGitMeshConfigAppliesWithTheCommit: a mesh.yaml at the root of the
// git path is the source's MeshConfig, applied in the same snapshot as the
// commit's other files; a commit whose mesh.yaml is bad is rejected whole
// (file, line and field named) and the last good one keeps serving; a
// mesh.yaml below the root is an ordinary config file; trustDomain in it
// is a warning (set when the control plane starts).
func TestGitMeshConfigAppliesWithTheCommit(t *testing.T) {
	ctx := context.Background()
	repo := newGitRepo(t)
	repo.commit("first", map[string]string{
		"mesh/a.yaml":    weYAML("a", "1.1.1.1"),
		"mesh/mesh.yaml": "defaultHttpRetryPolicy: {attempts: 5}\n",
	})
	src, st := newGitSource(t, repo.dir, "main", "mesh")
	must(t, src.Sync(ctx))
	snap := st.Snapshot()
	mc := meshOf(t, snap)
	if mc == nil || mc.GetDefaultHttpRetryPolicy().GetAttempts() != 5 {
		t.Fatalf("mesh config %v, want defaultHttpRetryPolicy attempts 5", mc)
	}
	if mc.GetConnectTimeout().AsDuration().Seconds() != 10 {
		t.Fatalf("connectTimeout %v, want Istio's default 10s filled in", mc.GetConnectTimeout())
	}
	if o := snap.Get(store.MeshConfigKey); o.Origin.File != "mesh/mesh.yaml" || o.Origin.Source == "" {
		t.Fatalf("origin %+v", o.Origin)
	}

	// One commit changes both: one snapshot holds both changes.
	sub := st.Subscribe()
	defer sub.Close()
	repo.commit("both", map[string]string{
		"mesh/a.yaml":    weYAML("a", "1.1.1.2"),
		"mesh/mesh.yaml": "defaultHttpRetryPolicy: {attempts: 7}\ntrustDomain: other.local\n",
	})
	must(t, src.Sync(ctx))
	ch := sub.Take()
	if _, ok := ch.Keys[store.MeshConfigKey]; !ok || len(ch.Keys) != 2 {
		t.Fatalf("changes %v, want the WorkloadEntry and the MeshConfig together", ch.Keys)
	}
	snap = st.Snapshot()
	if meshOf(t, snap).GetDefaultHttpRetryPolicy().GetAttempts() != 7 || addressOf(snap, "a") != "1.1.1.2" {
		t.Fatal("the commit was not applied whole")
	}
	var warned bool
	for _, w := range gitStatus(snap).Warnings {
		if w.Code == store.CodeMeshConfigNotApplied && w.Field == "trustDomain" && w.File == "mesh/mesh.yaml" && w.Line == 2 {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no VM1011 warning for trustDomain at mesh.yaml:2: %+v", gitStatus(snap).Warnings)
	}

	// A bad mesh.yaml rejects the commit, with its line and field.
	repo.commit("bad", map[string]string{
		"mesh/a.yaml":    weYAML("a", "1.1.1.3"),
		"mesh/mesh.yaml": "defaultHttpRetryPolicy: {attempts: 7}\nconnectTimeout: soon\n",
	})
	must(t, src.Sync(ctx))
	snap = st.Snapshot()
	if addressOf(snap, "a") != "1.1.1.2" || meshOf(t, snap).GetDefaultHttpRetryPolicy().GetAttempts() != 7 {
		t.Fatal("a commit with a bad mesh.yaml was applied")
	}
	errs := gitStatus(snap).Errors
	if len(errs) == 0 || errs[0].File != "mesh/mesh.yaml" || errs[0].Line != 2 || !strings.Contains(errs[0].Field, "connectTimeout") {
		t.Fatalf("errors %+v, want mesh.yaml:2 connectTimeout", errs)
	}

	// Removing mesh.yaml removes the MeshConfig; one below the root is
	// config like any other file (here: not a valid document).
	repo.commit("moved", map[string]string{"mesh/mesh.yaml": "", "mesh/sub/mesh.yaml": "defaultHttpRetryPolicy: {attempts: 7}\n"})
	must(t, src.Sync(ctx))
	if errs := gitStatus(st.Snapshot()).Errors; len(errs) == 0 || errs[0].File != "mesh/sub/mesh.yaml" {
		t.Fatalf("a mesh.yaml below the root was not read as config documents: %+v", errs)
	}
	repo.commit("gone", map[string]string{"mesh/sub/mesh.yaml": ""})
	must(t, src.Sync(ctx))
	if mc := meshOf(t, st.Snapshot()); mc != nil {
		t.Fatalf("mesh config still served after mesh.yaml was removed: %v", mc)
	}
}

// TestLoadDirectoryMeshConfig: vmesh validate's loader reads a directory's
// root mesh.yaml as its MeshConfig, and a mesh.yaml named by itself too.
func TestLoadDirectoryMeshConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mesh.yaml"), "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n")
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("a", "1.1.1.1"))
	for _, path := range []string{dir, filepath.Join(dir, "mesh.yaml")} {
		objs, errs, err := filestore.LoadPath(path)
		if err != nil || len(errs) > 0 {
			t.Fatalf("%s: %v %v", path, err, errs)
		}
		var mc *meshv1alpha1.MeshConfig
		for _, o := range objs {
			if o.Key == store.MeshConfigKey {
				mc = o.Spec.(*meshv1alpha1.MeshConfig)
			}
		}
		if mc.GetOutboundTrafficPolicy().GetMode() != meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY {
			t.Fatalf("%s: mesh config %v", path, mc)
		}
	}
}

// TestRootMeshYAMLOfResourcesStaysConfig: a tree that already names a file
// of Istio resources mesh.yaml keeps it as config documents.
func TestRootMeshYAMLOfResourcesStaysConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mesh.yaml"), weYAML("a", "1.1.1.1"))
	objs, errs, err := filestore.LoadPath(dir)
	if err != nil || len(errs) > 0 || len(objs) != 1 || objs[0].Kind != store.KindWorkloadEntry {
		t.Fatalf("objects %v, errors %v %v: want the WorkloadEntry", objs, errs, err)
	}
}

// The access log fields are applied (no VM1011); a JSON format that is not
// a JSON object, which Envoy sidecars replace by Istio's default, warns at
// its line.
func TestMeshConfigAccessLogWarnings(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want []int // lines of warnings
	}{
		{"accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: '{\"code\": \"%RESPONSE_CODE%\"}'\n", nil},
		{"accessLogFile: /dev/stdout\naccessLogFormat: '[%START_TIME%] %RESPONSE_CODE%'\n", nil},
		{"accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: '[%START_TIME%] %RESPONSE_CODE%'\n", []int{3}},
		{"accessLogFile: /dev/stdout\nenablePrometheusMerge: true\n", []int{2}},
		// trustDomainAliases: applied (inbound mTLS, servers' SANs,
		// AuthorizationPolicy principals).
		{"trustDomain: example.org\ntrustDomainAliases: [old.example]\n", nil},
		{"meshMTLS: {minProtocolVersion: TLSV1_3, cipherSuites: [ECDHE-ECDSA-AES256-GCM-SHA384]}\n", nil},
		// Tracing (issue 48): enableTracing, defaultProviders.tracing and
		// defaultConfig.tracing's sampling and tags are applied; the other
		// default providers and the bootstrap tracer addresses are not.
		{"enableTracing: false\ndefaultProviders:\n  tracing: [zipkin]\n  metrics: [prometheus]\n", []int{3, 4}},
		{"defaultConfig:\n  tracing:\n    sampling: 10\n    zipkin:\n      address: z:9411\n", []int{4}},
		// defaultProviders.tracing: a second provider (line 2), one no
		// extensionProviders entry defines, a kind vmesh does not trace to,
		// fields of a zipkin or opentelemetry provider it does not send.
		{"defaultProviders:\n  tracing: [nowhere]\n", []int{2}},
		{"extensionProviders:\n- name: z\n  zipkin: {service: z.ns.svc.cluster.local, port: 9411, path: /x}\ndefaultProviders:\n  tracing: [z, o]\n", []int{5}},
		{"extensionProviders:\n- name: z\n  zipkin:\n    service: z.ns.svc.cluster.local\n    port: 9411\n    headers:\n    - {name: x-token, envName: TOKEN}\ndefaultProviders:\n  tracing: [z]\n", []int{7}},
		{"extensionProviders:\n- name: d\n  datadog: {service: d.ns.svc.cluster.local, port: 8126}\ndefaultProviders:\n  tracing: [d]\n", []int{3}},
		{"extensionProviders:\n- name: o\n  opentelemetry:\n    service: o.ns.svc.cluster.local\n    port: 4317\n    resourceDetectors:\n      environment: {}\n      dynatrace: {}\n    dynatraceSampler: {tenant: t}\ndefaultProviders:\n  tracing: [o]\n", []int{9}},
		// A provider's unsent fields are warned whoever names it (a
		// Telemetry may); field names in either proto form.
		{"extensionProviders:\n- name: o\n  opentelemetry:\n    service: o.ns.svc.cluster.local\n    port: 4317\n    resource_detectors: {environment: {}}\n    dynatraceSampler: {tenant: t}\n", []int{7}},
		// defaultProviders.accessLogging: envoy (built in) and envoyOtelAls
		// apply; another kind (line 7) and a name nothing defines do not.
		{"extensionProviders:\n- name: als\n  envoyHttpAls: {service: a.ns.svc.cluster.local, port: 9000}\n- name: otel\n  envoyOtelAls: {service: o.ns.svc.cluster.local, port: 4317}\ndefaultProviders:\n  accessLogging: [envoy, otel, als, nowhere]\n", []int{7, 7}},
	} {
		var got []int
		for _, w := range filestore.MeshConfigWarnings("mesh.yaml", []byte(tc.doc)) {
			if w.Code != store.CodeMeshConfigNotApplied {
				t.Errorf("%q: code %s", tc.doc, w.Code)
			}
			got = append(got, w.Line)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: warnings at lines %v, want %v", tc.doc, got, tc.want)
		}
	}
}

// TestSourceMeshConfigSourcesWarned: configSources in a config source's
// mesh.yaml is a VM1011 warning at its line (sources are set at start,
// --mesh-config), once, and the rest of the file applies.
func TestSourceMeshConfigSourcesWarned(t *testing.T) {
	d := filestore.DecodeSourceFile("mesh.yaml", "", []byte("connectTimeout: 3s\nconfigSources:\n- address: xds://istiod:15010\n"), filestore.Limits{})
	if len(d.Errors) > 0 || len(d.Objects) != 1 {
		t.Fatalf("decoded %v %v", d.Objects, d.Errors)
	}
	if len(d.Warnings) != 1 {
		t.Fatalf("warnings %v, want one", d.Warnings)
	}
	w := d.Warnings[0]
	if w.Code != store.CodeMeshConfigNotApplied || w.Field != "configSources" || w.Line != 2 || !strings.Contains(w.Message, "set when the control plane starts (--mesh-config)") {
		t.Errorf("warning %v", w)
	}
}
