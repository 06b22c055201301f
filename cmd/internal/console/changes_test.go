package console_test

import (
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/cmd/internal/console"
	"github.com/vmesh/vmesh/internal/buildinfo"
	"github.com/vmesh/vmesh/store"
)

// A git source writes a commit's objects, then reports the commit: the
// changes page shows the revision with that commit and what it changed.
func TestChangesShowCommit(t *testing.T) {
	st := store.NewStore()
	srv := newConsole(t, st)
	git := store.Source{Name: "git:https://example.test/mesh.git", Class: store.ClassConfig}
	se := func(name string, line int) *store.Object {
		return &store.Object{
			Key:    store.Key{Kind: store.KindServiceEntry, Namespace: "default", Name: name},
			Spec:   &networking.ServiceEntry{Hosts: []string{name + ".internal"}, Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}},
			Origin: store.Origin{Source: git.Name, File: "mesh/" + name + ".yaml", Line: line, Commit: "0123456789abcdef0123456789abcdef01234567"},
		}
	}
	if err := st.Update(git, []*store.Object{se("a", 1), se("b", 7)}, nil); err != nil {
		t.Fatal(err)
	}
	st.SetStatus(git, "0123456789abcdef0123456789abcdef01234567", nil)
	eventually(t, 5*time.Second, "changes page with the first commit", func() bool {
		_, body := getPage(t, srv.URL+"/ui/changes")
		return strings.Contains(body, "0123456789ab</code>; </p>")
	})
	if err := st.Update(git, nil, []store.Key{{Kind: store.KindServiceEntry, Namespace: "default", Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	st.SetStatus(git, "fedcba9876543210fedcba9876543210fedcba98", nil)

	var body string
	eventually(t, 5*time.Second, "changes page with both commits", func() bool {
		_, body = getPage(t, srv.URL+"/ui/changes")
		return strings.Contains(body, "fedcba987654") && strings.Contains(body, "0123456789ab")
	})
	newest, older, _ := strings.Cut(body[strings.Index(body, "revision 2"):], "revision 1")
	if !strings.Contains(newest, "fedcba987654") || !strings.Contains(newest, "− ServiceEntry/default/b") || !strings.Contains(newest, "mesh/b.yaml:7") {
		t.Errorf("revision 2 does not show commit fedcba987654 removing b (mesh/b.yaml:7):\n%s", newest)
	}
	if !strings.Contains(older, "0123456789ab") || !strings.Contains(older, "+ ServiceEntry/default/a") || !strings.Contains(older, "+ ServiceEntry/default/b") {
		t.Errorf("revision 1 does not show commit 0123456789ab adding a and b:\n%s", older)
	}
}

// A changed object on the changes page shows what changed in it, field by
// field; every page shows the control plane's version; the overview lists
// the infos when there is no warning (issue 45).
func TestChangesShowFieldsAndVersionAndInfos(t *testing.T) {
	st := store.NewStore()
	infos := []store.ConfigError{{File: "vs.yaml", Line: 9, Severity: store.SeverityInfo, Code: store.CodeProxylessIgnores, Message: "proxyless gRPC clients ignore retries.perTryTimeout"}}
	srv := newConsole(t, console.Sources{Store: st, Warnings: func(*store.Snapshot) []store.ConfigError { return infos }})
	dir := store.Source{Name: "dir:/etc/vmesh", Class: store.ClassConfig}
	vs := func(w1, w2 int32) *store.Object {
		return &store.Object{
			Key: store.Key{Kind: store.KindVirtualService, Namespace: "demo", Name: "greeter"},
			Spec: &networking.VirtualService{Hosts: []string{"greeter"}, Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{
				{Destination: &networking.Destination{Host: "greeter", Subset: "v1"}, Weight: w1},
				{Destination: &networking.Destination{Host: "greeter", Subset: "v2"}, Weight: w2},
			}}}},
			Origin: store.Origin{Source: dir.Name, File: "greeter.yaml", Line: 1},
		}
	}
	if err := st.Update(dir, []*store.Object{vs(80, 20)}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the first revision", func() bool {
		_, body := getPage(t, srv.URL+"/ui/changes")
		return strings.Contains(body, "+ VirtualService/demo/greeter")
	})
	if err := st.Update(dir, []*store.Object{vs(50, 50)}, nil); err != nil {
		t.Fatal(err)
	}
	var body string
	eventually(t, 5*time.Second, "the change with its fields", func() bool {
		_, body = getPage(t, srv.URL+"/ui/changes")
		return strings.Contains(body, "~ VirtualService/demo/greeter")
	})
	for _, want := range []string{"spec.http[0].route[0].weight: 80 -&gt; 50", "spec.http[0].route[1].weight: 20 -&gt; 50"} {
		if !strings.Contains(body, want) {
			t.Errorf("changes page lacks %q:\n%s", want, body)
		}
	}
	if !strings.Contains(body, `id="build"`) || !strings.Contains(body, "vmesh "+buildinfo.Get().String()) {
		t.Errorf("no version in the page header")
	}
	_, overview := getPage(t, srv.URL+"/ui/")
	if !strings.Contains(overview, "No warnings.") || !strings.Contains(overview, `id="infos"`) || !strings.Contains(overview, "1 info(s)") ||
		!strings.Contains(overview, "perTryTimeout") {
		t.Errorf("overview does not list the info:\n%s", overview)
	}
}
