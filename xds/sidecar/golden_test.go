package sidecar_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/sidecar"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// rootNamespace holds mesh-wide policies, as in Istio.
const rootNamespace = "istio-system"

// fixture is loaded config: the model and the raw objects (for the
// policies and Sidecar specs the model does not carry yet).
type fixture struct {
	snap *model.Snapshot
	objs []*filestore.Object
}

func load(t testing.TB, dir string) fixture {
	t.Helper()
	objs, errs, err := filestore.LoadPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) > 0 {
		t.Fatalf("config errors: %v", errs)
	}
	st := filestore.NewStore()
	if err := st.Replace(filestore.Source{Name: "test", Class: filestore.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	return fixture{snap: model.Build(st.Snapshot()), objs: objs}
}

func selects(sel map[string]string, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// proxy fills the policy inputs the way the model is expected to select
// them: the Sidecar as model.SidecarFor does, PeerAuthentications mesh,
// namespace then workload, AuthorizationPolicies of the namespace (and
// root) whose selector matches.
func (f fixture) proxy(p sidecar.Proxy) *sidecar.Proxy {
	if sc := f.snap.SidecarFor(p.Namespace, p.Labels); sc != nil {
		for _, o := range f.objs {
			if o.Kind == filestore.KindSidecar && o.Namespace == sc.Namespace && o.Name == sc.Name {
				p.Sidecar = o.Spec.(*networking.Sidecar)
			}
		}
	}
	var mesh, ns, wl []*securityv1beta1.PeerAuthentication
	for _, o := range f.objs {
		switch spec := o.Spec.(type) {
		case *securityv1beta1.PeerAuthentication:
			sel := spec.GetSelector().GetMatchLabels()
			switch {
			case o.Namespace == rootNamespace && len(sel) == 0:
				mesh = append(mesh, spec)
			case o.Namespace == p.Namespace && len(sel) == 0:
				ns = append(ns, spec)
			case o.Namespace == p.Namespace && selects(sel, p.Labels):
				wl = append(wl, spec)
			}
		case *securityv1beta1.AuthorizationPolicy:
			if (o.Namespace == p.Namespace || o.Namespace == rootNamespace) && selects(spec.GetSelector().GetMatchLabels(), p.Labels) {
				p.Security.AuthorizationPolicies = append(p.Security.AuthorizationPolicies, sidecar.AuthorizationPolicy{Namespace: o.Namespace, Name: o.Name, Spec: spec})
			}
		}
	}
	p.Security.PeerAuthentications = slices.Concat(mesh, ns, wl)
	return &p
}

// render is the golden form: every resource as indented protojson.
func render(t *testing.T, r *sidecar.Resources) []byte {
	t.Helper()
	doc := map[string][]json.RawMessage{}
	add := func(key string, m proto.Message) {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, b); err != nil {
			t.Fatal(err)
		}
		doc[key] = append(doc[key], c.Bytes())
	}
	for _, l := range r.Listeners {
		add("1_listeners", l)
	}
	for _, x := range r.Routes {
		add("2_routes", x)
	}
	for _, c := range r.Clusters {
		add("3_clusters", c)
	}
	for _, e := range r.Endpoints {
		add("4_endpoints", e)
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// validateAll runs Validate (every Any unpacked) on every resource.
func validateAll(t *testing.T, r *sidecar.Resources) {
	t.Helper()
	for _, m := range r.Messages() {
		if err := sidecar.Validate(m); err != nil {
			t.Errorf("%T: %v", m, err)
		}
	}
}

func TestGolden(t *testing.T) {
	cases := []struct {
		name  string
		dir   string
		proxy sidecar.Proxy
	}{
		{
			name: "quickstart",
			dir:  "../../examples/quickstart/config",
			proxy: sidecar.Proxy{
				ID: "greeter-v1.demo", Namespace: "demo", IPs: []string{"127.0.0.1"},
				Labels: map[string]string{"app": "greeter", "version": "v1"}, Locality: "local/zone-a",
			},
		},
		{
			name: "features",
			dir:  "testdata/features",
			proxy: sidecar.Proxy{
				ID: "productpage-1.shop", Namespace: "shop", IPs: []string{"10.0.0.5"},
				Labels: map[string]string{"app": "productpage"}, Locality: "us-east/zone-a/rack-1",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := load(t, tc.dir)
			res, err := sidecar.Generate(f.snap, f.proxy(tc.proxy))
			if err != nil {
				t.Fatal(err)
			}
			validateAll(t, res)
			got := render(t, res)
			path := filepath.Join("testdata", tc.name+".golden.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the generated config; run go test ./xds/sidecar -update and review the diff", path)
			}
		})
	}
}

// sniOf returns the SNI of an UpstreamTlsContext.
func sniOf(t *testing.T, a *anypb.Any) string {
	t.Helper()
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := a.UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx.GetSni()
}
