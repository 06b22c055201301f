package main

// The Gateway API cases (issue 46): the Gateway API's own conformance
// manifests (sigs.k8s.io/gateway-api/conformance, embedded in that module,
// read at generation time) converted by Istio's converter
// (pilot/pkg/config/kube/gateway, the one istiod runs), then Istio's xDS for
// the router serving a Gateway or for the mesh's clients.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"istio.io/istio/pilot/pkg/config/kube/crd"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/config/schema/gvr"
	kubelib "istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/kclient/clienttest"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/gateway-api/conformance"
	"sigs.k8s.io/gateway-api/pkg/consts"
	"sigs.k8s.io/yaml"

	xdsfake "istio.io/istio/pilot/test/xds"
)

// conformanceVersion is the version of sigs.k8s.io/gateway-api/conformance
// in go.mod (the manifests' origin, written into each case's config.yaml).
const conformanceVersion = "sigs.k8s.io/gateway-api/conformance v1.6.3"

// gwapiClient is the WorkloadEntry (namespace default) the mesh cases'
// sidecar runs as.
const gwapiClient = "gwapi-client"

// gatewayClass is the class the conformance manifests' {GATEWAY_CLASS_NAME}
// becomes: Istio's, as istiod creates it.
const gatewayClass = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: istio
spec:
  controllerName: istio.io/gateway-controller
`

// gwapiInput is what a Gateway API case's manifests become: the Kubernetes
// objects Istio's converter reads (Namespaces, Services, Secrets, the
// Gateway API objects), the Istio objects both control planes serve
// (ServiceEntries and WorkloadEntries for the Services, Deployments and
// Gateways: the mapping of the README), and the YAML vmesh reads (the
// Gateway API objects and that mapping).
type gwapiInput struct {
	kube    []string
	mapping []string
	vmesh   []string
}

// loadGatewayAPI reads the manifests a case names ("# gateway-api:
// conformance:PATH ..." from the conformance module's embedded manifests,
// "istio:PATH" from the istio.io/istio module, "corpus:PATH" from the
// corpus folder dir) and maps them.
func loadGatewayAPI(dir string, refs []string, client bool) (*gwapiInput, string, error) {
	in := &gwapiInput{}
	var origin []string
	var docs []string
	secrets := map[string][]string{} // by source: the Secrets its test creates in code
	for _, ref := range refs {
		src, path, ok := strings.Cut(ref, ":")
		if !ok {
			return nil, "", fmt.Errorf("gateway-api %q: want conformance:PATH, istio:PATH or corpus:PATH", ref)
		}
		var data []byte
		var err error
		switch src {
		case "conformance":
			data, err = conformance.Manifests.ReadFile(path)
			origin = append(origin, conformanceVersion+" "+path)
			secrets[src] = suiteSecrets
		case "istio":
			secrets[src] = istioTestSecrets
			var mod string
			if mod, err = moduleDir("istio.io/istio"); err == nil {
				data, err = os.ReadFile(filepath.Join(mod, path))
			}
			origin = append(origin, istioVersion+" "+path)
		case "corpus":
			data, err = os.ReadFile(filepath.Join(dir, path))
			origin = append(origin, "tools/istio-xds-oracle/corpus/"+path)
		default:
			err = fmt.Errorf("unknown source %q", src)
		}
		if err != nil {
			return nil, "", fmt.Errorf("gateway-api %s: %w", ref, err)
		}
		docs = append(docs, splitDocs(strings.ReplaceAll(string(data), "{GATEWAY_CLASS_NAME}", "istio"))...)
	}
	defaults, err := newCRDDefaulter()
	if err != nil {
		return nil, "", err
	}
	m := mapper{}
	hasClass := false
	manifestSecrets := map[string]bool{}
	for _, d := range docs {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(d), &meta); err != nil {
			return nil, "", err
		}
		group, _, _ := strings.Cut(meta.APIVersion, "/")
		switch {
		case group == "gateway.networking.k8s.io":
			dd, err := defaults.apply(d)
			if err != nil {
				return nil, "", err
			}
			if meta.Kind == "ReferenceGrant" && meta.APIVersion == "gateway.networking.k8s.io/v1" {
				// Istio's controller watches ReferenceGrant v1beta1 (the
				// same schema); its fake client serves an object only at
				// the version it was created with.
				dd = strings.Replace(dd, "apiVersion: gateway.networking.k8s.io/v1\n", "apiVersion: gateway.networking.k8s.io/v1beta1\n", 1)
			}
			in.kube = append(in.kube, dd)
			in.vmesh = append(in.vmesh, d)
			if meta.Kind == "GatewayClass" && meta.Metadata.Name == "istio" {
				hasClass = true
			}
			if meta.Kind == "Gateway" {
				if err := m.gateway(d); err != nil {
					return nil, "", err
				}
			}
		case strings.HasSuffix(group, "istio.io"):
			in.mapping = append(in.mapping, d)
		case meta.Kind == "Service" && group == "v1":
			in.kube = append(in.kube, d)
			if err := m.service(d); err != nil {
				return nil, "", err
			}
		case meta.Kind == "Deployment":
			if err := m.deployment(d); err != nil {
				return nil, "", err
			}
		case meta.Kind == "Namespace" || meta.Kind == "Secret" || meta.Kind == "ConfigMap":
			in.kube = append(in.kube, d)
			if meta.Kind == "Secret" {
				ns := meta.Metadata.Namespace
				if ns == "" {
					ns = "default"
				}
				manifestSecrets[ns+"/"+meta.Metadata.Name] = true
			}
		}
	}
	// The certificate Secrets the suite's or Istio's test creates in code,
	// but those the manifests define (Kubernetes objects only: vmesh's
	// routers read the file credential of each Secret's name on the VM,
	// README "The Gateway API corpus").
	for _, src := range []string{"conformance", "istio"} {
		var names []string
		for _, nn := range secrets[src] {
			if !manifestSecrets[nn] {
				names = append(names, nn)
			}
		}
		if len(names) == 0 {
			continue
		}
		ss, err := certSecrets(names)
		if err != nil {
			return nil, "", err
		}
		in.kube = append(in.kube, ss...)
	}
	if !hasClass {
		in.kube = append(in.kube, gatewayClass)
		in.vmesh = append(in.vmesh, gatewayClass)
	}
	if client {
		m.workload(gwapiClient, "default", gwapiClient, map[string]string{"app": gwapiClient})
	}
	in.mapping = append(in.mapping, m.out...)
	in.vmesh = append(in.vmesh, in.mapping...)
	return in, strings.Join(origin, ", "), nil
}

func moduleDir(mod string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", mod, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// splitDocs splits a YAML stream into its non-empty documents, comments
// before the first key dropped.
func splitDocs(s string) []string {
	var out []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		var keep []string
		started := false
		for _, l := range strings.Split(d, "\n") {
			t := strings.TrimSpace(l)
			if !started && (t == "" || strings.HasPrefix(t, "#")) {
				continue
			}
			started = true
			keep = append(keep, l)
		}
		if len(keep) > 0 {
			out = append(out, strings.TrimRight(strings.Join(keep, "\n"), "\n")+"\n")
		}
	}
	return out
}

// mapper turns Kubernetes Services, Deployments and Gateways into the
// ServiceEntries and WorkloadEntries vmesh has instead (README, "The
// Gateway API corpus").
type mapper struct {
	out            []string
	services, pods int
}

type kubeService struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Selector map[string]string `json:"selector"`
		Ports    []struct {
			Name        string `json:"name"`
			Port        int    `json:"port"`
			TargetPort  any    `json:"targetPort"`
			AppProtocol string `json:"appProtocol"`
		} `json:"ports"`
	} `json:"spec"`
}

// portProtocol is the protocol Istio gives a Kubernetes Service port: its
// appProtocol, else its name's prefix; a port Istio would sniff is HTTP
// (the conformance backends speak HTTP; vmesh does not sniff
// ServiceEntry ports).
func portProtocol(name, appProtocol string) string {
	switch strings.ToLower(appProtocol) {
	case "http", "kubernetes.io/ws":
		return "HTTP"
	case "http2", "kubernetes.io/h2c":
		return "HTTP2"
	case "grpc":
		return "GRPC"
	case "https", "kubernetes.io/wss":
		return "HTTPS"
	case "tcp":
		return "TCP"
	case "tls":
		return "TLS"
	}
	prefix, _, _ := strings.Cut(strings.ToLower(name), "-")
	switch prefix {
	case "http2", "grpc", "https", "tcp", "tls", "mongo", "redis", "mysql":
		return strings.ToUpper(prefix)
	}
	return "HTTP"
}

func (m *mapper) service(doc string) error {
	var s kubeService
	if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
		return err
	}
	m.services++
	ns := s.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n", s.Metadata.Name, ns)
	fmt.Fprintf(&b, "  hosts:\n  - %s.%s.svc.cluster.local\n  addresses:\n  - 10.96.%d.%d\n", s.Metadata.Name, ns, m.services/250, m.services%250+1)
	b.WriteString("  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n")
	for i, p := range s.Spec.Ports {
		name := p.Name
		if name == "" {
			name = fmt.Sprintf("port-%d", i)
		}
		fmt.Fprintf(&b, "  - name: %s\n    number: %d\n    protocol: %s\n", name, p.Port, portProtocol(p.Name, p.AppProtocol))
		if tp, ok := p.TargetPort.(float64); ok && int(tp) != p.Port {
			fmt.Fprintf(&b, "    targetPort: %d\n", int(tp))
		}
	}
	if len(s.Spec.Selector) > 0 {
		b.WriteString("  workloadSelector:\n    labels:\n")
		for _, k := range sortedKeysOf(s.Spec.Selector) {
			fmt.Fprintf(&b, "      %s: %s\n", k, s.Spec.Selector[k])
		}
	}
	m.out = append(m.out, b.String())
	return nil
}

func (m *mapper) deployment(doc string) error {
	var d struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			Template struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec struct {
					ServiceAccountName string `json:"serviceAccountName"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
		return err
	}
	ns := d.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	sa := d.Spec.Template.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	m.workload(d.Metadata.Name, ns, sa, d.Spec.Template.Metadata.Labels)
	return nil
}

func (m *mapper) workload(name, ns, sa string, labels map[string]string) {
	m.pods++
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n", name, ns)
	fmt.Fprintf(&b, "  address: 10.20.%d.%d\n  serviceAccount: %s\n", m.pods/250, m.pods%250+1, sa)
	if len(labels) > 0 {
		b.WriteString("  labels:\n")
		for _, k := range sortedKeysOf(labels) {
			fmt.Fprintf(&b, "    %s: %s\n", k, labels[k])
		}
	}
	m.out = append(m.out, b.String())
}

// gateway maps a Gateway of Istio's class to what Istio's gateway
// deployment controller creates for it: a Service NAME-istio with the
// listeners' ports over the pods labelled
// gateway.networking.k8s.io/gateway-name: NAME (a ServiceEntry here), and
// one such pod (a WorkloadEntry NAME-istio, service account NAME-istio).
func (m *mapper) gateway(doc string) error {
	var g struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			GatewayClassName string `json:"gatewayClassName"`
			Addresses        []any  `json:"addresses"`
			Listeners        []struct {
				Name     string `json:"name"`
				Port     int    `json:"port"`
				Protocol string `json:"protocol"`
			} `json:"listeners"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(doc), &g); err != nil {
		return err
	}
	if g.Spec.GatewayClassName != "istio" || len(g.Spec.Addresses) > 0 {
		return nil
	}
	ns := g.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	name := g.Metadata.Name + "-istio"
	labels := map[string]string{"gateway.networking.k8s.io/gateway-name": g.Metadata.Name}
	var b strings.Builder
	m.services++
	fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n", name, ns)
	fmt.Fprintf(&b, "  hosts:\n  - %s.%s.svc.cluster.local\n  addresses:\n  - 10.96.%d.%d\n", name, ns, m.services/250, m.services%250+1)
	b.WriteString("  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n")
	seen := map[int]bool{}
	for _, l := range g.Spec.Listeners {
		if seen[l.Port] {
			continue
		}
		seen[l.Port] = true
		proto := l.Protocol
		if proto == "UDP" {
			continue
		}
		fmt.Fprintf(&b, "  - name: %s-%d\n    number: %d\n    protocol: %s\n", strings.ToLower(proto), l.Port, l.Port, proto)
	}
	b.WriteString("  workloadSelector:\n    labels:\n      gateway.networking.k8s.io/gateway-name: " + g.Metadata.Name + "\n")
	m.out = append(m.out, b.String())
	m.workload(name, ns, name, labels)
	return nil
}

func sortedKeysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// convertGatewayAPI runs Istio's Gateway API controller (inside a fake
// discovery server, as istiod runs it beside its Kubernetes registry) on
// the case's Kubernetes objects and returns the Istio configs it makes:
// Gateways, VirtualServices, DestinationRules.
func convertGatewayAPI(f *failer, in *gwapiInput) ([]config.Config, error) {
	mapping, unknown, err := crd.ParseInputs(strings.Join(in.mapping, "---\n"))
	if err != nil {
		return nil, err
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%d mapped documents of kinds Istio does not know", len(unknown))
	}
	s := xdsfake.NewFakeDiscoveryServer(f, xdsfake.FakeOptions{Configs: mapping, KubernetesObjectString: strings.Join(in.kube, "---\n")})
	gwc := s.Env().GatewayAPIController
	if gwc == nil {
		return nil, fmt.Errorf("no Gateway API controller in the fake discovery server")
	}
	if err := annotateGatewayCRDs(f, s.KubeClient()); err != nil {
		return nil, err
	}
	// The controller's collections settle asynchronously after the first
	// push: wait until two reads a while apart agree.
	list := func() []config.Config {
		var out []config.Config
		for _, k := range []config.GroupVersionKind{gvk.Gateway, gvk.VirtualService, gvk.DestinationRule} {
			out = append(out, gwc.List(k, "")...)
		}
		sort.Slice(out, func(a, b int) bool {
			ka, kb := out[a].GroupVersionKind.Kind+"/"+out[a].Namespace+"/"+out[a].Name, out[b].GroupVersionKind.Kind+"/"+out[b].Namespace+"/"+out[b].Name
			return ka < kb
		})
		return out
	}
	prev, same := "", 0
	for range 200 {
		time.Sleep(50 * time.Millisecond)
		if !gwc.HasSynced() {
			continue
		}
		cur := list()
		y, err := configsYAML(cur)
		if err != nil {
			return nil, err
		}
		if y != prev || y == "" {
			prev, same = y, 0
			continue
		}
		if same++; same == 20 { // a second without a change
			return cur, nil
		}
	}
	return list(), nil
}

// gatewayCRDs are the Gateway API CRDs the fake discovery server creates
// (pilot/test/xds/fake.go, FakeOptions' CRDs of the Kubernetes registry).
var gatewayCRDs = []schema.GroupVersionResource{
	gvr.GatewayClass, gvr.KubernetesGateway, gvr.HTTPRoute, gvr.GRPCRoute,
	gvr.TCPRoute, gvr.TLSRoute, gvr.ReferenceGrant,
}

// annotateGatewayCRDs gives the fake Kubernetes client's Gateway API CRDs
// the bundle-version annotation an installed CRD carries
// (gateway.networking.k8s.io/bundle-version: this module's Gateway API
// version), as Istio's converter test does (conversion_test.go,
// setupClientCRDs). The fake server creates its CRDs without annotations,
// and Istio's CRD watcher ignores a CRD named in
// gatewayapi.MinimumCRDVersions (GRPCRoute, TCPRoute, TLSRoute,
// BackendTLSPolicy) that has none: the converter's delayed informers of
// those kinds never start, and its GRPCRoute, TCPRoute and TLSRoute
// collections stay empty although the client holds the objects. Once a CRD
// is known the watcher runs, in order, the callbacks waiting for it: the
// converter's (which start its informers) and then this function's, so on
// return every Gateway API informer is running (convertGatewayAPI then waits
// for the converter's output to settle).
func annotateGatewayCRDs(f *failer, kc kubelib.Client) error {
	type wait struct {
		crd  schema.GroupVersionResource
		done chan struct{}
	}
	var waits []wait
	for _, r := range gatewayCRDs {
		w := wait{crd: r, done: make(chan struct{})}
		if !kc.CrdWatcher().KnownOrCallback(r, func(<-chan struct{}) { close(w.done) }) {
			waits = append(waits, w)
		}
	}
	for _, r := range gatewayCRDs {
		clienttest.MakeCRDWithAnnotations(f, kc, r, map[string]string{
			consts.BundleVersionAnnotation: consts.BundleVersion,
		})
	}
	timeout := time.After(30 * time.Second)
	for _, w := range waits {
		select {
		case <-w.done:
		case <-timeout:
			return fmt.Errorf("the CRD watcher does not know %s 30 s after its CRD was annotated", w.crd)
		}
	}
	return nil
}

// configsYAML writes configs as Kubernetes YAML (the converted.yaml of a
// case, for reading).
func configsYAML(cs []config.Config) (string, error) {
	var b bytes.Buffer
	for i, c := range cs {
		obj, err := crd.ConvertConfig(c)
		if err != nil {
			return "", err
		}
		y, err := yaml.Marshal(obj)
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.String(), nil
}

// copyConformance writes every YAML manifest of the conformance module
// (base/, mesh/, tests/, tests/mesh/) under dir, each with its origin, for
// vmesh's validation test (gatewayapi: TestConformanceManifests), which
// cannot import the conformance module.
func copyConformance(dir string) (int, error) {
	if err := os.RemoveAll(dir); err != nil {
		return 0, err
	}
	n := 0
	err := fs.WalkDir(conformance.Manifests, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := conformance.Manifests.ReadFile(path)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		head := fmt.Sprintf("# origin: %s %s (copied by tools/istio-xds-oracle, make istio-xds; do not edit)\n", conformanceVersion, path)
		n++
		return os.WriteFile(dst, append([]byte(head), data...), 0o644)
	})
	return n, err
}

// crdDefaulter applies the defaults of the Gateway API CRDs (the module's
// config/crd/standard) to an object as the Kubernetes API server does
// (k8s.io/apiextensions-apiserver's structural defaulting): Istio's
// converter reads objects an API server has defaulted (an HTTPRoute match
// without a path is PathPrefix /, a backendRef's weight 1, ...).
type crdDefaulter map[string]*structuralschema.Structural // kind/version

func newCRDDefaulter() (crdDefaulter, error) {
	dir, err := moduleDir("sigs.k8s.io/gateway-api")
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "config", "crd", "standard", "gateway.networking.k8s.io_*.yaml"))
	if err != nil {
		return nil, err
	}
	d := crdDefaulter{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil || crd.Kind != "CustomResourceDefinition" {
			continue // the ValidatingAdmissionPolicy file
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			var internal apiextensions.JSONSchemaProps
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
				return nil, err
			}
			s, err := structuralschema.NewStructural(&internal)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", crd.Spec.Names.Kind, v.Name, err)
			}
			d[crd.Spec.Names.Kind+"/"+v.Name] = s
		}
	}
	return d, nil
}

// apply returns doc with its CRD's defaults.
func (d crdDefaulter) apply(doc string) (string, error) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		return "", err
	}
	kind, _ := obj["kind"].(string)
	av, _ := obj["apiVersion"].(string)
	_, version, _ := strings.Cut(av, "/")
	s := d[kind+"/"+version]
	if s == nil {
		return doc, nil
	}
	defaulting.Default(obj, s)
	out, err := yaml.Marshal(obj)
	return string(out), err
}

// suiteSecrets are the certificate Secrets the conformance suite creates
// at run time besides its manifests (utils/suite/suite.go, "programmatic
// resources"), namespace/name.
var suiteSecrets = []string{
	"gateway-conformance-web-backend/certificate",
	"gateway-conformance-infra/tls-validity-checks-certificate",
	"gateway-conformance-infra/tls-validity-checks-client-certificate",
	"gateway-conformance-infra/tls-validity-checks-per-port-client-certificate",
	"gateway-conformance-infra/tls-checks-certificate",
	"gateway-conformance-infra/tls-checks-client-certificate",
	"gateway-conformance-infra/tls-passthrough-checks-certificate",
	"gateway-conformance-app-backend/tls-passthrough-checks-certificate",
	"gateway-conformance-infra/tls-terminate-checks-certificate",
}

// istioTestSecrets are the valid certificate Secrets Istio's converter test
// defines in Go (conversion_test.go, objects), namespace/name.
var istioTestSecrets = []string{
	"istio-system/my-cert-http",
	"ns2/ns2-cert",
	"ns3/ns3-cert",
	"ns4/ns4-cert",
	"istio-system/my-cert",
	"istio-system/my-cert-http2",
	"cert/cert",
	"bookinfo/bookinfo-secret",
	"bookinfo/another-secret",
}

// certSecrets writes the Secrets names (namespace/name) as Kubernetes
// Secrets of type kubernetes.io/tls holding one self-signed certificate and
// its key, made now: Istio's converter refuses a certificateRef whose
// Secret is absent or holds no valid pair. The certificate never reaches
// the saved answers (they name Secrets only; vmesh's routers name the file
// credential of the Secret's name), so a new one each run changes nothing.
func certSecrets(names []string) ([]string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "istio-xds-oracle"},
		DNSNames:     []string{"*"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	crt := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	k := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	var out []string
	for _, nn := range names {
		ns, name, _ := strings.Cut(nn, "/")
		out = append(out, fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\ntype: kubernetes.io/tls\ndata:\n  tls.crt: %s\n  tls.key: %s\n  ca.crt: %s\n", name, ns, crt, k, crt))
	}
	return out, nil
}
