package sidecar_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/sidecar"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// load builds the model of the config in dir.
func load(t testing.TB, dir string) *model.Snapshot {
	t.Helper()
	return loadEdited(t, dir, nil)
}

// loadEdited builds the model of the config in dir after edit, when not
// nil, has replaced each object by what it returns (nil drops it); extra
// objects are added.
func loadEdited(t testing.TB, dir string, edit func(*store.Object) *store.Object, extra ...*store.Object) *model.Snapshot {
	t.Helper()
	objs, errs, err := filestore.LoadPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) > 0 {
		t.Fatalf("config errors: %v", errs)
	}
	var kept []*store.Object
	for _, o := range objs {
		if edit != nil {
			o = edit(o)
		}
		if o != nil {
			kept = append(kept, o)
		}
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, append(kept, extra...)); err != nil {
		t.Fatal(err)
	}
	return model.Build(st.Snapshot())
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
		proxy model.Workload
	}{
		{
			name: "quickstart",
			dir:  "../../examples/quickstart/config",
			proxy: model.Workload{Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(),
				ID: "greeter-v1.demo", Namespace: "demo", IPs: []string{"127.0.0.1"},
				Labels: map[string]string{"app": "greeter", "version": "v1"}, Locality: "local/zone-a",
			},
		},
		{
			name: "features",
			dir:  "testdata/features",
			proxy: model.Workload{Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(),
				ID: "productpage-1.shop", Namespace: "shop", IPs: []string{"10.0.0.5"},
				Labels: map[string]string{"app": "productpage"}, Locality: "us-east/zone-a/rack-1",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := sidecar.Generate(model.NewView(load(t, tc.dir), tc.proxy))
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
