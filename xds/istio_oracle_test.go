package xds_test

// Istio as the oracle (issue 15 part 7): tools/istio-xds-oracle runs Istio
// 1.31's own generators on every case of its corpus and saves their xDS under
// testdata/istio-oracle/<case>/{grpc,sidecar}.json with the case's YAML.
// TestIstioOracle builds vmesh's resources for the same YAML and the same node
// and compares them after the normalisation below; every difference left must
// match an entry of istioOracleKnown (with its reason), else the test fails.
// `go test ./xds/ -run IstioOracle -v` logs the counts; -oracle.report writes
// every difference, listed or not, to a file.

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/internal/filecert"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	grpcgen "github.com/vmesh/vmesh/xds/grpc"
	"github.com/vmesh/vmesh/xds/router"
	"github.com/vmesh/vmesh/xds/sidecar"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var oracleReport = flag.String("oracle.report", "", "write every Istio oracle difference (listed or not) to this file")

// oracleNode and oracleOutput are the saved answers' format
// (tools/istio-xds-oracle/main.go).
type oracleNode struct {
	Kind         string            `json:"kind"`
	ID           string            `json:"id"`
	Namespace    string            `json:"namespace"`
	IPs          []string          `json:"ips"`
	Labels       map[string]string `json:"labels"`
	WorkloadName string            `json:"workloadName"`
	Locality     string            `json:"locality"`
	Requested    []string          `json:"requested"`
}

type oracleOutput struct {
	Istio     string            `json:"istio"`
	Node      oracleNode        `json:"node"`
	Listeners []json.RawMessage `json:"listeners"`
	Routes    []json.RawMessage `json:"routes"`
	Clusters  []json.RawMessage `json:"clusters"`
	Endpoints []json.RawMessage `json:"endpoints"`
	Server    *oracleNode       `json:"server"`
	Inbound   []json.RawMessage `json:"inbound"`
}

// oracleDiff is one difference between Istio's and vmesh's resources after
// normalisation. Path is in the normalised form's protojson (camelCase)
// field names; lists keyed by name show [name], others [index].
type oracleDiff struct {
	Case, Proxy, Type, Resource, Path string
	Istio, Vmesh                      string
}

func (d oracleDiff) String() string {
	return fmt.Sprintf("%s %s %s %s %s: istio=%s vmesh=%s", d.Case, d.Proxy, d.Type, d.Resource, d.Path, d.Istio, d.Vmesh)
}

// oracleKnown is a listed difference: regular expressions (empty matches
// anything, anchored) on proxy kind, type, resource name, path and case,
// with the one-line reason. A difference matching no entry fails the test.
type oracleKnown struct {
	Proxy, Type, Resource, Path, Case string
	// Istio and Vmesh, when set, must match that side of the difference
	// too.
	Istio, Vmesh string
	Reason       string
}

// oracleRegexps caches the compiled expressions of istioOracleKnown.
var oracleRegexps = map[string]*regexp.Regexp{}

func (k oracleKnown) matches(d oracleDiff) bool {
	m := func(re, s string) bool {
		if re == "" {
			return true
		}
		r := oracleRegexps[re]
		if r == nil {
			r = regexp.MustCompile("^(?:" + re + ")$")
			oracleRegexps[re] = r
		}
		return r.MatchString(s)
	}
	return m(k.Proxy, d.Proxy) && m(k.Type, d.Type) && m(k.Resource, d.Resource) && m(k.Path, d.Path) && m(k.Case, d.Case) && m(k.Istio, d.Istio) && m(k.Vmesh, d.Vmesh)
}

func TestIstioOracle(t *testing.T) {
	root := filepath.Join("testdata", "istio-oracle")
	dirs, err := filepath.Glob(filepath.Join(root, "*", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatalf("no saved Istio answers under %s (make istio-xds)", root)
	}
	var all []oracleDiff
	var compared, equal, routers int
	byType := map[string][3]int{}
	hits := make([]int, len(istioOracleKnown))
	for _, cfg := range dirs {
		dir := filepath.Dir(cfg)
		name := filepath.Base(dir)
		snap, verrs := oracleLoad(t, cfg)
		for _, e := range verrs {
			all = append(all, oracleDiff{Case: name, Proxy: "*", Type: "validation", Resource: "config.yaml", Path: "", Istio: "accepted", Vmesh: e})
		}
		for _, kind := range []string{"grpc", "sidecar", "router"} {
			file := filepath.Join(dir, kind+".json")
			if _, err := os.Stat(file); kind == "router" && os.IsNotExist(err) {
				continue // a router case has router.json only, the others no router.json
			} else if kind != "router" && os.IsNotExist(err) {
				if _, rerr := os.Stat(filepath.Join(dir, "router.json")); rerr == nil {
					continue
				}
			}
			out := oracleRead(t, file)
			c := oracleCompare{name: name, proxy: kind}
			switch kind {
			case "grpc":
				c.grpc(t, snap, out)
			case "sidecar":
				c.sidecar(t, snap, out)
			default:
				c.router(t, snap, out)
				routers++
			}
			compared += c.compared
			equal += c.equal
			for k, n := range c.byType {
				b := byType[k]
				byType[k] = [3]int{b[0] + n[0], b[1] + n[1], b[2] + n[2]}
			}
			all = append(all, c.diffs...)
		}
	}
	if routers == 0 {
		t.Error("no router case (router.json): the router oracle compares nothing")
	}
	var unlisted []oracleDiff
	for _, d := range all {
		listed := false
		for i, k := range istioOracleKnown {
			if k.matches(d) {
				hits[i]++
				listed = true
				break
			}
		}
		if !listed {
			unlisted = append(unlisted, d)
		}
	}
	t.Logf("Istio oracle: %d cases, %d resources compared, %d equal after normalisation, %d differences (%d listed, %d unlisted)",
		len(dirs), compared, equal, len(all), len(all)-len(unlisted), len(unlisted))
	types := map[string]bool{}
	for k := range byType {
		types[k] = true
	}
	for _, k := range oracleSortedNames(types) {
		t.Logf("%-20s %4d compared, %4d equal, %4d equal but for domains", k, byType[k][0], byType[k][1], byType[k][2])
	}
	for i, k := range istioOracleKnown {
		t.Logf("listed %4d× %s %s %s %s: %s", hits[i], k.Proxy, k.Type, k.Resource, k.Path, k.Reason)
	}
	for i, k := range istioOracleKnown {
		if hits[i] == 0 {
			t.Errorf("listed difference no longer occurs (remove it from istioOracleKnown and the README): %s %s %s %s: %s", k.Proxy, k.Type, k.Resource, k.Path, k.Reason)
		}
	}
	if *oracleReport != "" {
		var b strings.Builder
		for _, d := range all {
			b.WriteString(d.String() + "\n")
		}
		if err := os.WriteFile(*oracleReport, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const show = 60
	for i, d := range unlisted {
		if i == show {
			t.Errorf("... and %d more unlisted differences", len(unlisted)-show)
			break
		}
		t.Errorf("unlisted difference: %s", d)
	}
}

// oracleLoad decodes the case's config.yaml (and mesh.yaml, when present)
// with vmesh's filestore and builds the model; documents vmesh refuses are
// returned as messages (and left out of the model).
func oracleLoad(t *testing.T, path string) (*model.Snapshot, []string) {
	t.Helper()
	objs, errs, err := filestore.LoadPath(path)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "istio-oracle", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	// The Gateway API cases (gwapi-*): vmesh's converter, as the control
	// plane's gateway-api writer runs it.
	if gw := gatewayapi.Convert(st.Snapshot()); len(gw.Objects) > 0 {
		if err := st.Replace(gatewayapi.Source(), gw.Objects); err != nil {
			t.Fatal(err)
		}
	}
	// The case's MeshConfig, when it has one (mesh.yaml next to config.yaml).
	mesh := model.DefaultMesh()
	meshFile := filepath.Join(filepath.Dir(path), filestore.MeshConfigFile)
	if data, err := os.ReadFile(meshFile); err == nil {
		mc, errs := filestore.DecodeMeshConfig(meshFile, data)
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		mesh = model.MeshFromConfig(mc)
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return model.BuildWith(st.Snapshot(), mesh), msgs
}

func oracleRead(t *testing.T, path string) *oracleOutput {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var o oracleOutput
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &o
}

func (n oracleNode) workload(kind model.ProxyKind) model.Workload {
	p := &xds.Proxy{Kind: kind, ID: n.ID, Namespace: n.Namespace, Labels: n.Labels, IPs: n.IPs,
		WorkloadName: n.WorkloadName, Locality: n.Locality}
	return p.Workload()
}

type oracleCompare struct {
	name, proxy     string
	compared, equal int
	diffs           []oracleDiff
	// byType counts, per "proxy type", the resources compared, equal, and
	// equal but for their virtual hosts' domains.
	byType map[string][3]int
}

type oracleJsonObj = map[string]any

// generic turns a proto message into its protojson form as plain Go values,
// the form Istio's answers are saved in.
func oracleGeneric(t *testing.T, m proto.Message) oracleJsonObj {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v oracleJsonObj
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func oracleGenericAll[T proto.Message](t *testing.T, ms []T) []oracleJsonObj {
	out := make([]oracleJsonObj, 0, len(ms))
	for _, m := range ms {
		out = append(out, oracleGeneric(t, m))
	}
	return out
}

func oracleRawAll(t *testing.T, rs []json.RawMessage) []oracleJsonObj {
	t.Helper()
	out := make([]oracleJsonObj, 0, len(rs))
	for _, r := range rs {
		var v oracleJsonObj
		if err := json.Unmarshal(r, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// grpc compares a proxyless client's resources: the listeners Istio was asked
// for (host:port of every visible service port and, for services of the
// client's namespace, the short forms name:port, name.ns:port,
// name.ns.svc:port), their route configurations, the clusters a grpc-go client then asks
// for (each listener's default cluster and every cluster its routes name) and
// the endpoints of the EDS ones.
func (c *oracleCompare) grpc(t *testing.T, snap *model.Snapshot, out *oracleOutput) {
	v := model.NewView(snap, out.Node.workload(model.KindGRPC))
	ls, err := grpcgen.Listeners(v)
	if err != nil {
		t.Fatalf("%s: vmesh listeners: %v", c.name, err)
	}
	rs, err := grpcgen.Routes(v)
	if err != nil {
		t.Fatalf("%s: vmesh routes: %v", c.name, err)
	}
	cs, err := grpcgen.Clusters(v)
	if err != nil {
		t.Fatalf("%s: vmesh clusters: %v", c.name, err)
	}
	es, err := grpcgen.Endpoints(v)
	if err != nil {
		t.Fatalf("%s: vmesh endpoints: %v", c.name, err)
	}
	requested := map[string]bool{}
	for _, n := range out.Node.Requested {
		requested[n] = true
	}
	// Short names (reviews:9080 from namespace default) are served as vmesh's
	// server serves them (xds/grpc shortNameListener): the listener of
	// the service the name expands to (grpcgen.ExpandShortName), renamed.
	byName := map[string]oracleJsonObj{}
	for _, l := range oracleGenericAll(t, ls) {
		byName[oracleStr(l["name"])] = l
	}
	var vl []oracleJsonObj
	for _, n := range out.Node.Requested {
		l := byName[n]
		if l == nil {
			if full, ok := grpcgen.ExpandShortName(n, out.Node.Namespace); ok && byName[full] != nil {
				b, _ := json.Marshal(byName[full])
				_ = json.Unmarshal(b, &l)
				l["name"] = n
			}
		}
		if l != nil {
			vl = append(vl, l)
		}
	}
	vr := oracleKeep(oracleGenericAll(t, rs), func(o oracleJsonObj) bool { return requested[oracleStr(o["name"])] })
	// The clusters a client asks for: every listener's default cluster and
	// the clusters its routes name.
	wanted := map[string]bool{}
	for _, n := range out.Node.Requested {
		if _, short := grpcgen.ExpandShortName(n, out.Node.Namespace); short {
			continue
		}
		if host, port, ok := strings.Cut(n, ":"); ok {
			wanted["outbound|"+port+"||"+host] = true
		}
	}
	for _, r := range vr {
		for _, name := range oracleRouteClusters(r) {
			wanted[name] = true
		}
	}
	vc := oracleKeep(oracleGenericAll(t, cs), func(o oracleJsonObj) bool { return wanted[oracleStr(o["name"])] })
	eds := map[string]bool{}
	for _, cl := range vc {
		if oracleStr(cl["type"]) == "EDS" {
			eds[oracleStr(cl["name"])] = true
		}
	}
	ve := oracleKeep(oracleGenericAll(t, es), func(o oracleJsonObj) bool { return eds[oracleStr(o["clusterName"])] })

	c.compareSet(t, "LDS", oracleRawAll(t, out.Listeners), vl, "name", oracleNormGRPCListener)
	c.compareSet(t, "RDS", oracleRawAll(t, out.Routes), vr, "name", oracleNormGRPCRoute)
	c.compareSet(t, "CDS", oracleRawAll(t, out.Clusters), vc, "name", oracleNormCluster)
	c.compareSet(t, "EDS", oracleRawAll(t, out.Endpoints), ve, "clusterName", oracleNormEndpoints)

	// A proxyless server running as the sidecar workload: its server
	// listeners (PeerAuthentication decides TLS, AuthorizationPolicy the
	// RBAC filters).
	if out.Server == nil {
		return
	}
	sv := model.NewView(snap, out.Server.workload(model.KindGRPC))
	var vin []oracleJsonObj
	for _, n := range out.Server.Requested {
		name := grpcgen.InboundListenerPrefix + strings.TrimPrefix(n, oracleIstioInboundPrefix)
		l, err := grpcgen.InboundListener(sv, name)
		if err != nil {
			c.diffs = append(c.diffs, oracleDiff{Case: c.name, Proxy: c.proxy, Type: "LDS-inbound", Resource: oracleInboundName(name),
				Istio: "present", Vmesh: "error: " + err.Error()})
			continue
		}
		vin = append(vin, oracleGeneric(t, l))
	}
	c.compareSet(t, "LDS-inbound", oracleRawAll(t, out.Inbound), vin, "name", oracleNormGRPCInbound)
}

// oracleIstioInboundPrefix starts Istio's proxyless server listener names
// (grpcxds.ServerListenerNamePrefix); vmesh's is grpcgen.InboundListenerPrefix.
const oracleIstioInboundPrefix = "xds.istio.io/grpc/lds/inbound/"

// inboundName is a server listener's name without either prefix:
// inbound/IP:port.
func oracleInboundName(n string) string {
	n = strings.TrimPrefix(n, oracleIstioInboundPrefix)
	n = strings.TrimPrefix(n, grpcgen.InboundListenerPrefix)
	return "inbound/" + n
}

var oracleVmeshPolicyName = regexp.MustCompile(`^ns\[(.*)\]-policy\[(.*)\]-rule\[(\d+)\]$`)

// oracleNormGRPCInbound: the server listener's name without its prefix (Istio
// xds.istio.io/grpc/lds/inbound/, vmesh xds.vmesh.io/grpc/lds/inbound/), the
// coarse listener form of oracleNormSidecarListener with its RBAC filters in full,
// and vmesh's RBAC policy names ns[NS]-policy[NAME]-rule[I] written as
// Istio's proxyless generator names them, NS-NAME-I.
func oracleNormGRPCInbound(side string, o oracleJsonObj) oracleJsonObj {
	o["name"] = oracleInboundName(oracleStr(o["name"]))
	out := oracleNormSidecarListener(side, o)
	var rename func(v any)
	rename = func(v any) {
		switch x := v.(type) {
		case oracleJsonObj:
			if ps := oracleObj(x["policies"]); ps != nil {
				for k, p := range ps {
					if m := oracleVmeshPolicyName.FindStringSubmatch(k); m != nil {
						delete(ps, k)
						ps[m[1]+"-"+m[2]+"-"+m[3]] = p
					}
				}
			}
			for _, e := range x {
				rename(e)
			}
		case []any:
			for _, e := range x {
				rename(e)
			}
		}
	}
	rename(out)
	return out
}

// sidecar compares an Envoy sidecar's four types: listeners coarsely (which
// listeners, addresses, filter chains by match, the filters of each chain),
// routes, clusters and endpoints in full after normalisation.
func (c *oracleCompare) sidecar(t *testing.T, snap *model.Snapshot, out *oracleOutput) {
	v := model.NewView(snap, out.Node.workload(model.KindSidecar))
	r, err := sidecar.Generate(v)
	if err != nil {
		t.Fatalf("%s: vmesh sidecar: %v", c.name, err)
	}
	c.compareSet(t, "LDS", oracleRawAll(t, out.Listeners), oracleGenericAll(t, r.Listeners), "name", oracleNormSidecarListener)
	c.compareSet(t, "RDS", oracleRawAll(t, out.Routes), oracleGenericAll(t, r.Routes), "name", oracleNormSidecarRoute)
	c.compareSet(t, "CDS", oracleRawAll(t, out.Clusters), oracleGenericAll(t, r.Clusters), "name", oracleNormCluster)
	c.compareSet(t, "EDS", oracleRawAll(t, out.Endpoints), oracleGenericAll(t, r.Endpoints), "clusterName", oracleNormEndpoints)
}

// router compares a router (Istio's gateway, a Router proxy) with the
// sidecar's normalisations: its listeners in the coarse form (chains keyed
// by their match, with the SDS secrets a TLS chain names), its route
// configurations, clusters and endpoints in full.
func (c *oracleCompare) router(t *testing.T, snap *model.Snapshot, out *oracleOutput) {
	v := model.NewView(snap, out.Node.workload(model.KindRouter))
	lds, err := router.Listeners(v)
	if err != nil {
		t.Fatalf("%s: vmesh router: %v", c.name, err)
	}
	rds, err := router.Routes(v)
	if err != nil {
		t.Fatalf("%s: vmesh router: %v", c.name, err)
	}
	cds, err := router.Clusters(v)
	if err != nil {
		t.Fatalf("%s: vmesh router: %v", c.name, err)
	}
	eds, err := router.Endpoints(v)
	if err != nil {
		t.Fatalf("%s: vmesh router: %v", c.name, err)
	}
	c.compareSet(t, "LDS", oracleRawAll(t, out.Listeners), oracleGenericAll(t, lds), "name", oracleNormRouterListener)
	c.compareSet(t, "RDS", oracleRawAll(t, out.Routes), oracleGenericAll(t, rds), "name", oracleNormSidecarRoute)
	c.compareSet(t, "CDS", oracleRawAll(t, out.Clusters), oracleGenericAll(t, cds), "name", oracleNormCluster)
	c.compareSet(t, "EDS", oracleRawAll(t, out.Endpoints), oracleGenericAll(t, eds), "clusterName", oracleNormEndpoints)
}

// compareSet matches resources by (normalised) name and diffs each pair.
func (c *oracleCompare) compareSet(t *testing.T, typ string, istio, vmesh []oracleJsonObj, key string, norm func(side string, o oracleJsonObj) oracleJsonObj) {
	index := func(side string, list []oracleJsonObj) map[string]oracleJsonObj {
		m := map[string]oracleJsonObj{}
		for _, o := range list {
			n := norm(side, o)
			m[oracleStr(n[key])] = n
		}
		return m
	}
	im, vm := index("istio", istio), index("vmesh", vmesh)
	names := map[string]bool{}
	for n := range im {
		names[n] = true
	}
	for n := range vm {
		names[n] = true
	}
	for _, n := range oracleSortedNames(names) {
		a, b := im[n], vm[n]
		d := oracleDiff{Case: c.name, Proxy: c.proxy, Type: typ, Resource: n}
		switch {
		case a == nil:
			d.Istio, d.Vmesh = "absent", "present"
			c.diffs = append(c.diffs, d)
		case b == nil:
			d.Istio, d.Vmesh = "present", "absent"
			c.diffs = append(c.diffs, d)
		default:
			c.compared++
			if c.byType == nil {
				c.byType = map[string][3]int{}
			}
			k := c.proxy + " " + typ
			n := c.byType[k]
			n[0]++
			before := len(c.diffs)
			oracleDiffValues("", a, b, func(path string, x, y any) {
				d := d
				d.Path, d.Istio, d.Vmesh = path, oracleShort(x), oracleShort(y)
				c.diffs = append(c.diffs, d)
			})
			if len(c.diffs) == before {
				c.equal++
				n[1]++
			}
			onlyDomains := true
			for _, d := range c.diffs[before:] {
				if !strings.Contains(d.Path, "/domains/") {
					onlyDomains = false
				}
			}
			if onlyDomains {
				n[2]++
			}
			c.byType[k] = n
		}
	}
}

// diffValues reports every leaf where a and b differ. Lists of objects that
// all have distinct "name"s are compared by name, other lists by index.
func oracleDiffValues(path string, a, b any, report func(string, any, any)) {
	switch x := a.(type) {
	case oracleJsonObj:
		y, ok := b.(oracleJsonObj)
		if !ok {
			report(path, a, b)
			return
		}
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		for _, k := range oracleSortedNames(keys) {
			xv, xok := x[k]
			yv, yok := y[k]
			p := path + "/" + k
			switch {
			case !xok:
				report(p, nil, yv)
			case !yok:
				report(p, xv, nil)
			default:
				oracleDiffValues(p, xv, yv, report)
			}
		}
	case []any:
		y, ok := b.([]any)
		if !ok {
			report(path, a, b)
			return
		}
		if xn, yn := oracleByNames(x), oracleByNames(y); xn != nil && yn != nil {
			keys := map[string]bool{}
			for k := range xn {
				keys[k] = true
			}
			for k := range yn {
				keys[k] = true
			}
			for _, k := range oracleSortedNames(keys) {
				p := path + "[" + k + "]"
				xv, xok := xn[k]
				yv, yok := yn[k]
				switch {
				case !xok:
					report(p, nil, yv)
				case !yok:
					report(p, xv, nil)
				default:
					oracleDiffValues(p, xv, yv, report)
				}
			}
			return
		}
		for i := 0; i < max(len(x), len(y)); i++ {
			p := fmt.Sprintf("%s[%d]", path, i)
			switch {
			case i >= len(x):
				report(p, nil, y[i])
			case i >= len(y):
				report(p, x[i], nil)
			default:
				oracleDiffValues(p, x[i], y[i], report)
			}
		}
	default:
		if fmt.Sprint(a) != fmt.Sprint(b) {
			report(path, a, b)
		}
	}
}

// byNames indexes a list of objects by their distinct "name"s; nil when the
// list is not such a list.
func oracleByNames(l []any) map[string]any {
	if len(l) == 0 {
		return nil
	}
	m := map[string]any{}
	for _, e := range l {
		o, ok := e.(oracleJsonObj)
		if !ok {
			return nil
		}
		n, ok := o["name"].(string)
		if !ok || n == "" {
			return nil
		}
		if _, dup := m[n]; dup {
			return nil
		}
		m[n] = e
	}
	return m
}

func oracleShort(v any) string {
	if v == nil {
		return "absent"
	}
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}

func oracleStr(v any) string { s, _ := v.(string); return s }

func oracleSortedNames(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func oracleKeep(l []oracleJsonObj, f func(oracleJsonObj) bool) []oracleJsonObj {
	var out []oracleJsonObj
	for _, o := range l {
		if f(o) {
			out = append(out, o)
		}
	}
	return out
}

// routeClusters returns the clusters a route configuration's routes name.
func oracleRouteClusters(rc oracleJsonObj) []string {
	var out []string
	for _, vh := range oracleList(rc["virtualHosts"]) {
		for _, r := range oracleList(oracleObj(vh)["routes"]) {
			a := oracleObj(oracleObj(r)["route"])
			if c := oracleStr(a["cluster"]); c != "" {
				out = append(out, c)
			}
			for _, w := range oracleList(oracleObj(a["weightedClusters"])["clusters"]) {
				out = append(out, oracleStr(oracleObj(w)["name"]))
			}
		}
	}
	return out
}

func oracleObj(v any) oracleJsonObj { o, _ := v.(oracleJsonObj); return o }
func oracleList(v any) []any        { l, _ := v.([]any); return l }

// ---- normalisation -------------------------------------------------------
//
// Each rule says what is removed or renamed before the diff, and why; what is
// left is either equal or a listed difference (istioOracleKnown). The rules
// are listed in tools/istio-xds-oracle/README.md.

// oracleNormCommon applies the rules shared by every type and both proxy kinds:
//   - metadata, decorator, statPrefix, altStatName, includeRequestAttemptCount,
//     trackRemaining: config provenance, tracing and stats, no traffic effect;
//   - route names: Envoy stats only (Istio names only VirtualService routes
//     that have a name, vmesh names every route);
//   - explicit defaults equal to absence: healthStatus HEALTHY (UNKNOWN is
//     treated as healthy), caseSensitive true, resourceApiVersion V3,
//     enforcingConsecutiveGatewayFailure 0, ringHashLbConfig.minimumRingSize
//     1024 (Envoy's default), a typedExtensionProtocolOptions
//     entry with no field set, empty objects;
//   - Istio's deprecated certificate-provider copies (grpcgen sends both
//     the current and the pre-1.66 fields): tlsCertificateCertificateProviderInstance
//     is dropped and combinedValidationContext{defaultValidationContext,
//     validationContextCertificateProviderInstance} is compared as
//     validationContext;
//   - virtual host domains are a set: compared as {domain: true}.
func oracleNormCommon(v any) any {
	switch x := v.(type) {
	case oracleJsonObj:
		for _, k := range []string{"metadata", "decorator", "statPrefix", "altStatName", "includeRequestAttemptCount", "trackRemaining"} {
			delete(x, k)
		}
		if x["healthStatus"] == "HEALTHY" {
			delete(x, "healthStatus")
		}
		if x["caseSensitive"] == true {
			delete(x, "caseSensitive")
		}
		if x["resourceApiVersion"] == "V3" {
			delete(x, "resourceApiVersion")
		}
		if rh := oracleObj(x["ringHashLbConfig"]); rh != nil && rh["minimumRingSize"] == "1024" {
			delete(rh, "minimumRingSize")
		}
		if x["enforcingConsecutiveGatewayFailure"] == float64(0) {
			delete(x, "enforcingConsecutiveGatewayFailure")
		}
		if tep := oracleObj(x["typedExtensionProtocolOptions"]); tep != nil {
			for k, e := range tep {
				if len(oracleObj(e)) == 1 {
					delete(tep, k)
				}
			}
		}
		if cv := oracleObj(x["combinedValidationContext"]); cv != nil && cv["validationContextCertificateProviderInstance"] != nil {
			delete(x, "combinedValidationContext")
			delete(x, "tlsCertificateCertificateProviderInstance")
			x["validationContext"] = cv["defaultValidationContext"]
		}
		if d, ok := x["domains"].([]any); ok {
			set := oracleJsonObj{}
			for _, e := range d {
				set[oracleStr(e)] = true
			}
			x["domains"] = set
		}
		if rs, ok := x["routes"].([]any); ok {
			for _, r := range rs {
				delete(oracleObj(r), "name")
			}
		}
		for k, e := range x {
			x[k] = oracleNormCommon(e)
			if o, ok := x[k].(oracleJsonObj); ok && len(o) == 0 {
				delete(x, k)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = oracleNormCommon(e)
		}
	}
	return v
}

// istioRouteName maps Istio's proxyless RDS name outbound|port||host to
// vmesh's host:port (vmesh names a client's route configuration after its
// listener, the name grpc-go dials).
func oracleIstioRouteName(n string) string {
	parts := strings.Split(n, "|")
	if len(parts) == 4 && parts[0] == "outbound" {
		return parts[3] + ":" + parts[1]
	}
	return n
}

// oracleNormGRPCListener keeps what grpc-go reads of a client listener: its name,
// the route configuration it names (Istio's RDS name mapped to vmesh's) and
// the HTTP filter names. The listener address (Istio sets the VIP:port;
// grpc-go ignores an API listener's address) and stat prefixes are dropped.
func oracleNormGRPCListener(side string, o oracleJsonObj) oracleJsonObj {
	hcm := oracleObj(oracleObj(o["apiListener"])["apiListener"])
	var filters []any
	for _, f := range oracleList(hcm["httpFilters"]) {
		filters = append(filters, oracleStr(oracleObj(f)["name"]))
	}
	rds := oracleStr(oracleObj(hcm["rds"])["routeConfigName"])
	if side == "istio" {
		rds = oracleIstioRouteName(rds)
	}
	return oracleJsonObj{"name": o["name"], "rds": rds, "httpFilters": filters}
}

// oracleNormGRPCRoute renames Istio's route configuration (outbound|port||host)
// to vmesh's (host:port) and drops what grpc-go does not read of a route:
// timeout and maxGrpcTimeout (grpc-go applies max_stream_duration only) and
// a maxStreamDuration of 0s (no limit, as when absent).
func oracleNormGRPCRoute(side string, o oracleJsonObj) oracleJsonObj {
	if side == "istio" {
		o["name"] = oracleIstioRouteName(oracleStr(o["name"]))
	}
	for _, vh := range oracleList(o["virtualHosts"]) {
		for _, r := range oracleList(oracleObj(vh)["routes"]) {
			a := oracleObj(oracleObj(r)["route"])
			if a == nil {
				continue
			}
			delete(a, "timeout")
			delete(a, "maxGrpcTimeout")
			if msd := oracleObj(a["maxStreamDuration"]); msd != nil && msd["maxStreamDuration"] == "0s" && len(msd) == 1 {
				delete(a, "maxStreamDuration")
			}
		}
	}
	return oracleNormCommon(o).(oracleJsonObj)
}

// oracleNormSidecarRoute: the common rules (both sides ignore the Host
// header's port and list domains without one).
func oracleNormSidecarRoute(side string, o oracleJsonObj) oracleJsonObj {
	return oracleNormCommon(o).(oracleJsonObj)
}

// oracleNormCluster: the common rules, and Istio's istio.metadata_exchange
// upstream network filter (telemetry: peer metadata for Istio's stats) is
// dropped.
func oracleNormCluster(side string, o oracleJsonObj) oracleJsonObj {
	if fs := oracleList(o["filters"]); fs != nil {
		var kept []any
		for _, f := range fs {
			if !oracleTelemetryFilters[oracleStr(oracleObj(f)["name"])] {
				kept = append(kept, f)
			}
		}
		if kept == nil {
			delete(o, "filters")
		} else {
			o["filters"] = kept
		}
	}
	oracleNormFileCerts(o)
	oracleNormSANs(o)
	return oracleNormCommon(o).(oracleJsonObj)
}

// oracleNormFileCerts rewrites, in every TLS context under v, the
// certificate files and roots that Istio names for its agent's SDS
// (file-cert:CERT~KEY, file-root:CA with an absolute path: a
// DestinationRule's clientCertificate, privateKey and caCertificates)
// into the form vmesh sends: Envoy reads the same files itself
// (tls_certificates with the chain and key file names; a static
// validation context with the roots file as trusted_ca, holding the
// default context's checks). The paths are compared, not who reads the
// files (Istio's agent, which re-reads them when they change; vmesh's
// Envoy, as the proxy's user, when it loads the cluster).
func oracleNormFileCerts(v any) {
	switch x := v.(type) {
	case oracleJsonObj:
		if ctc := oracleObj(x["commonTlsContext"]); ctc != nil {
			var kept, certs []any
			for _, sc := range oracleList(ctc["tlsCertificateSdsSecretConfigs"]) {
				cert, key, _, ok := filecert.Parse(oracleStr(oracleObj(sc)["name"]))
				if !ok || cert == "" || !strings.HasPrefix(cert, "/") || !strings.HasPrefix(key, "/") {
					kept = append(kept, sc)
					continue
				}
				certs = append(certs, oracleJsonObj{"certificateChain": oracleJsonObj{"filename": cert}, "privateKey": oracleJsonObj{"filename": key}})
			}
			if certs != nil {
				ctc["tlsCertificates"] = append(oracleList(ctc["tlsCertificates"]), certs...)
				if kept == nil {
					delete(ctc, "tlsCertificateSdsSecretConfigs")
				} else {
					ctc["tlsCertificateSdsSecretConfigs"] = kept
				}
			}
			cvc := oracleObj(ctc["combinedValidationContext"])
			if _, _, ca, ok := filecert.Parse(oracleStr(oracleObj(cvc["validationContextSdsSecretConfig"])["name"])); ok && strings.HasPrefix(ca, "/") {
				vc := oracleObj(cvc["defaultValidationContext"])
				if vc == nil {
					vc = oracleJsonObj{}
				}
				vc["trustedCa"] = oracleJsonObj{"filename": ca}
				ctc["validationContext"] = vc
				delete(ctc, "combinedValidationContext")
			}
		}
		for _, e := range x {
			oracleNormFileCerts(e)
		}
	case []any:
		for _, e := range x {
			oracleNormFileCerts(e)
		}
	}
}

// oracleNormSANs moves the SAN check of every TLS context under v out of
// its validation context, to the context's own "subjectAltNames": {name:
// SAN types}, so that it is compared whatever else of the validation
// context differs (the roots: Istio's SDS file-root:… in a combined
// context, vmesh's file). Istio's deprecated match_subject_alt_names
// matches each name as a SAN of any type (Envoy expands it to DNS, URI,
// email and IP address), as vmesh's typed matchers of all four types do:
// both "any"; a typed matcher of fewer types lists them ("URI"). The names
// are a set (a SAN matching any of them passes).
func oracleNormSANs(v any) {
	switch x := v.(type) {
	case oracleJsonObj:
		vc := oracleObj(x["validationContext"])
		if vc == nil {
			vc = oracleObj(oracleObj(x["combinedValidationContext"])["defaultValidationContext"])
		}
		if vc != nil && (vc["matchSubjectAltNames"] != nil || vc["matchTypedSubjectAltNames"] != nil) {
			sans := oracleJsonObj{}
			for _, m := range oracleList(vc["matchSubjectAltNames"]) {
				sans[oracleStr(oracleObj(m)["exact"])] = "any"
			}
			types := map[string][]string{}
			for _, m := range oracleList(vc["matchTypedSubjectAltNames"]) {
				mo := oracleObj(m)
				name := oracleStr(oracleObj(mo["matcher"])["exact"])
				types[name] = append(types[name], oracleStr(mo["sanType"]))
			}
			for name, ts := range types {
				slices.Sort(ts)
				if slices.Equal(ts, []string{"DNS", "EMAIL", "IP_ADDRESS", "URI"}) {
					sans[name] = "any"
				} else {
					sans[name] = strings.Join(ts, ",")
				}
			}
			delete(vc, "matchSubjectAltNames")
			delete(vc, "matchTypedSubjectAltNames")
			x["subjectAltNames"] = sans
		}
		for _, e := range x {
			oracleNormSANs(e)
		}
	case []any:
		for _, e := range x {
			oracleNormSANs(e)
		}
	}
}

// oracleNormEndpoints sorts each locality's endpoints by address and localities by
// locality and priority; endpoint metadata (Istio's workload and tlsMode labels for
// telemetry and transport socket matching) is dropped by oracleNormCommon.
func oracleNormEndpoints(side string, o oracleJsonObj) oracleJsonObj {
	o = oracleNormCommon(o).(oracleJsonObj)
	eps := oracleList(o["endpoints"])
	for _, l := range eps {
		lb := oracleList(oracleObj(l)["lbEndpoints"])
		sort.Slice(lb, func(i, j int) bool { return oracleShort(lb[i]) < oracleShort(lb[j]) })
	}
	// By locality, then priority: failoverPriority splits a locality into
	// several of different priorities.
	sort.Slice(eps, func(i, j int) bool {
		li, lj := oracleShort(oracleObj(eps[i])["locality"]), oracleShort(oracleObj(eps[j])["locality"])
		if li != lj {
			return li < lj
		}
		return oracleShort(oracleObj(eps[i])["priority"]) < oracleShort(oracleObj(eps[j])["priority"])
	})
	return o
}

// oracleTelemetryFilters are Istio's telemetry filters (peer metadata exchange,
// stats, gRPC stats, the ALPN override that signals Istio peers): vmesh
// has no Istio telemetry, so they are left out of the filter lists compared.
var oracleTelemetryFilters = map[string]bool{
	"istio.metadata_exchange": true, "istio.stats": true, "envoy.filters.http.grpc_stats": true, "istio.alpn": true,
}

// filterName maps a filter's name to the compared form: vmesh names its
// RBAC filters envoy.filters.http.rbac.deny / .allow / .audit / .custom.P
// and its ext_authz filters envoy.filters.http.ext_authz.P, Istio names every RBAC
// filter envoy.filters.http.rbac (.DENY on proxyless servers) and its
// proxyless server HCMs inbound-hcmplaintext / inbound-hcmmtls (names are
// labels to Envoy and grpc-go).
func oracleFilterName(n string) string {
	if strings.HasPrefix(n, "envoy.filters.http.rbac.") {
		return "envoy.filters.http.rbac"
	}
	if strings.HasPrefix(n, "envoy.filters.network.rbac.") {
		return "envoy.filters.network.rbac"
	}
	if strings.HasPrefix(n, "envoy.filters.http.ext_authz.") { // vmesh: one per provider, .<provider>
		return "envoy.filters.http.ext_authz"
	}
	if strings.HasPrefix(n, "inbound-hcm") { // Istio's proxyless server HCMs: inbound-hcmplaintext, inbound-hcmmtls
		return "envoy.filters.network.http_connection_manager"
	}
	return n
}

// oracleNormSidecarListener is the coarse listener form: name, address,
// bindToPort, listener filter names, and per filter chain, keyed by its
// match's destination port, transport protocol, server names and prefix
// ranges: the application protocols (ALPN) it matches, the network filter
// names, whether TLS is terminated (and a client certificate required),
// and for an HTTP connection manager its route configuration (or the
// clusters of its inline routes) and HTTP filter names, for a tcp_proxy its
// cluster(s). Telemetry filters are left out.
// Each TLS chain's client checks (oracleClientChecks) are compared too: the
// trust domains an inbound mesh mTLS chain accepts a client's SPIFFE ID
// from (Istio's prefixes spiffe://TD/ for the mesh's trust domain and its
// aliases).
func oracleNormSidecarListener(side string, o oracleJsonObj) oracleJsonObj {
	return oracleNormListener(o, true)
}

// oracleNormRouterListener is the coarse listener form with each TLS
// chain's client checks (oracleClientChecks): a gateway server's
// subjectAltNames, pins, CRL and insecureSkipVerify.
func oracleNormRouterListener(side string, o oracleJsonObj) oracleJsonObj {
	return oracleNormListener(o, true)
}

// oracleNormListener is the coarse listener form, with each TLS chain's
// client checks when clientChecks.
func oracleNormListener(o oracleJsonObj, clientChecks bool) oracleJsonObj {
	out := oracleJsonObj{"name": o["name"]}
	if sa := oracleObj(oracleObj(o["address"])["socketAddress"]); sa != nil {
		out["address"] = fmt.Sprintf("%v:%v", sa["address"], sa["portValue"])
	}
	var lf []any
	for _, f := range oracleList(o["listenerFilters"]) {
		lf = append(lf, oracleStr(oracleObj(f)["name"]))
	}
	if lf != nil {
		out["listenerFilters"] = lf
	}
	if b, ok := o["bindToPort"]; ok {
		out["bindToPort"] = b
	}
	if al := o["accessLog"]; al != nil {
		out["accessLog"] = al
	}
	// How long the listener filters wait for a connection's first bytes,
	// and what then: a timeout closes connections whose client says
	// nothing first (server-first protocols, pre-opened pools).
	for _, k := range []string{"listenerFiltersTimeout", "continueOnListenerFiltersTimeout"} {
		if v, ok := o[k]; ok {
			out[k] = v
		}
	}
	chains := oracleJsonObj{}
	for _, fc := range oracleList(o["filterChains"]) {
		m := oracleObj(oracleSortStrings(oracleObj(fc)["filterChainMatch"]))
		keyObj := oracleJsonObj{}
		for _, k := range []string{"destinationPort", "transportProtocol", "serverNames", "prefixRanges"} {
			if m[k] != nil {
				keyObj[k] = m[k]
			}
		}
		// ALPN: a chain matching Istio's mesh ALPNs (istio, istio-h2, ...)
		// is keyed "istio", whatever the exact list; others by their list.
		if ap := oracleList(m["applicationProtocols"]); ap != nil {
			keyObj["alpn"] = ap
			for _, a := range ap {
				if strings.HasPrefix(oracleStr(a), "istio") {
					keyObj["alpn"] = "istio"
				}
			}
		}
		b, _ := json.Marshal(keyObj)
		chains[string(b)] = oracleChainSummary(oracleObj(fc), clientChecks)
	}
	out["filterChains"] = chains
	if d := oracleObj(o["defaultFilterChain"]); d != nil {
		out["defaultFilterChain"] = oracleChainSummary(d, clientChecks)
	}
	return out
}

// sortStrings sorts the string lists in a filter chain match (sets).
func oracleSortStrings(v any) any {
	switch x := v.(type) {
	case oracleJsonObj:
		for k, e := range x {
			x[k] = oracleSortStrings(e)
		}
	case []any:
		allStr := true
		for _, e := range x {
			if _, ok := e.(string); !ok {
				allStr = false
			}
		}
		if allStr {
			sort.Slice(x, func(i, j int) bool { return x[i].(string) < x[j].(string) })
		}
	}
	return v
}

// oracleClientChecks summarises a downstream validation context's static
// checks: its subject alt names as {pattern: SAN types} (an exact name as
// itself, another matcher as "KIND:VALUE", prefix:spiffe://cluster.local/;
// Istio's deprecated match_subject_alt_names matches each as a SAN of any
// type, which is vmesh's typed matchers of all four types: both "any"; a
// typed matcher of fewer types lists them, "URI"; the patterns are a set,
// a SAN matching any passes), certificate pins, CRL and trust chain
// verification; nil when it has none.
func oracleClientChecks(vc oracleJsonObj) oracleJsonObj {
	out := oracleJsonObj{}
	pattern := func(m oracleJsonObj) string {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k == "ignoreCase" {
				continue
			}
			if k == "exact" {
				return oracleStr(m[k])
			}
			b, _ := json.Marshal(m[k])
			return k + ":" + strings.Trim(string(b), `"`)
		}
		return ""
	}
	sans := oracleJsonObj{}
	for _, m := range oracleList(vc["matchSubjectAltNames"]) {
		sans[pattern(oracleObj(m))] = "any"
	}
	types := map[string][]string{}
	for _, m := range oracleList(vc["matchTypedSubjectAltNames"]) {
		mo := oracleObj(m)
		name := pattern(oracleObj(mo["matcher"]))
		types[name] = append(types[name], oracleStr(mo["sanType"]))
	}
	for name, ts := range types {
		slices.Sort(ts)
		if slices.Equal(ts, []string{"DNS", "EMAIL", "IP_ADDRESS", "URI"}) {
			sans[name] = "any"
		} else {
			sans[name] = strings.Join(ts, ",")
		}
	}
	if len(sans) > 0 {
		out["subjectAltNames"] = sans
	}
	for _, k := range []string{"verifyCertificateSpki", "verifyCertificateHash", "crl", "trustChainVerification"} {
		if v, ok := vc[k]; ok {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func oracleChainSummary(fc oracleJsonObj, clientChecks bool) oracleJsonObj {
	s := oracleJsonObj{}
	if ts := oracleObj(fc["transportSocket"]); ts != nil {
		tc := oracleObj(ts["typedConfig"])
		tls := oracleJsonObj{"type": tc["@type"], "requireClientCertificate": tc["requireClientCertificate"]}
		// A gateway's credentials: the SDS secrets of its certificate and
		// of the CA it checks clients against (kubernetes://NAME and
		// kubernetes://NAME-cacert), and the ALPN it offers. Certificate
		// files (file-cert:CERT~KEY, file-root:CA) are served by the agent
		// on both sides: their SDS configs are compared in full, and so is
		// whether a validation context is static (none for SIMPLE).
		ctc := oracleObj(tc["commonTlsContext"])
		var sds []any
		files := false
		for _, sc := range oracleList(ctc["tlsCertificateSdsSecretConfigs"]) {
			if n := oracleStr(oracleObj(sc)["name"]); strings.HasPrefix(n, "file-") {
				files = true
				sds = append(sds, sc)
				continue
			}
			sds = append(sds, oracleSecretName(oracleStr(oracleObj(sc)["name"])))
		}
		if ca := oracleObj(oracleObj(ctc["combinedValidationContext"])["validationContextSdsSecretConfig"]); ca != nil {
			if strings.HasPrefix(oracleStr(ca["name"]), "file-") {
				files = true
				sds = append(sds, oracleJsonObj{"ca": ca})
			} else {
				sds = append(sds, "ca:"+oracleSecretName(oracleStr(ca["name"])))
			}
		}
		if files || slices.ContainsFunc(sds, func(n any) bool { return strings.Contains(oracleStr(n), "kubernetes://") }) {
			tls["sds"] = sds
			tls["alpn"] = ctc["alpnProtocols"]
		}
		if files {
			tls["staticValidationContext"] = ctc["validationContext"] != nil
		}
		// What the chain checks client certificates for besides their
		// roots (subject alt names, pins, CRL, trust chain), whichever
		// the kind of validation context.
		vc := oracleObj(oracleObj(ctc["combinedValidationContext"])["defaultValidationContext"])
		if vc == nil {
			vc = oracleObj(ctc["validationContext"])
		}
		if v := oracleClientChecks(vc); v != nil && clientChecks {
			tls["clientChecks"] = v
		}
		// The TLS versions and cipher suites the chain accepts.
		if p := ctc["tlsParams"]; p != nil && clientChecks {
			tls["tlsParams"] = p
		}
		s["tls"] = tls
	}
	var filters []any
	for _, f := range oracleList(fc["filters"]) {
		fo := oracleObj(f)
		name := oracleStr(fo["name"])
		if !oracleTelemetryFilters[name] {
			filters = append(filters, oracleFilterName(name))
		}
		tc := oracleObj(fo["typedConfig"])
		switch {
		case strings.HasSuffix(oracleStr(tc["@type"]), "HttpConnectionManager"):
			var hf []any
			for _, h := range oracleList(tc["httpFilters"]) {
				if n := oracleStr(oracleObj(h)["name"]); !oracleTelemetryFilters[n] {
					hf = append(hf, oracleFilterName(n))
				}
			}
			h := oracleJsonObj{"httpFilters": hf}
			// Telemetry metrics: Istio's stats filter (istio.stats, in
			// Istio's Envoy build only) with the metrics and their
			// overrides; Istio adds it only for a metrics provider.
			if c := oracleTypedConfigs(oracleList(tc["httpFilters"]), "istio.stats"); c != nil {
				h["istioStats"] = c
			}
			if rb := oracleRbacConfigs(oracleList(tc["httpFilters"])); rb != nil {
				h["rbac"] = rb
			}
			// RequestAuthentication and CUSTOM: the jwt_authn and ext_authz
			// configs in full.
			for _, name := range []string{"envoy.filters.http.jwt_authn", "envoy.filters.http.ext_authz"} {
				if c := oracleTypedConfigs(oracleList(tc["httpFilters"]), name); c != nil {
					h[strings.TrimPrefix(name, "envoy.filters.http.")] = c
				}
			}
			if r := oracleObj(tc["rds"]); r != nil {
				h["rds"] = r["routeConfigName"]
			}
			if rc := oracleObj(tc["routeConfig"]); rc != nil {
				h["inlineRoutes"] = oracleRouteClusters(rc)
				// In full but for the names of the configuration and its
				// virtual hosts (labels; vmesh's proxyless servers name
				// theirs by address, Istio's "inbound").
				rc = oracleNormCommon(rc).(oracleJsonObj)
				delete(rc, "name")
				for _, vh := range oracleList(rc["virtualHosts"]) {
					delete(oracleObj(vh), "name")
				}
				h["inlineRouteConfig"] = rc
			}
			// MeshConfig accessLogFile: the access logs in full.
			if al := tc["accessLog"]; al != nil {
				h["accessLog"] = al
			}
			// The connection manager's other settings in full (timeouts,
			// upgrades, path normalisation, client certificate headers, ...),
			// but for its stat prefix.
			for k, v := range tc {
				switch k {
				case "@type", "httpFilters", "rds", "routeConfig", "statPrefix", "accessLog":
				default:
					h["settings/"+k] = v
				}
			}
			s["hcm"] = h
		case strings.HasSuffix(oracleStr(tc["@type"]), "TcpProxy"):
			if c := tc["cluster"]; c != nil {
				s["tcpProxy"] = c
			} else {
				s["tcpProxy"] = tc["weightedClusters"]
			}
			if al := tc["accessLog"]; al != nil {
				s["tcpProxyAccessLog"] = al
			}
		}
	}
	s["filters"] = filters
	if c := oracleTypedConfigs(oracleList(fc["filters"]), "istio.stats"); c != nil {
		s["istioStats"] = c
	}
	if rb := oracleRbacConfigs(oracleList(fc["filters"])); rb != nil {
		s["rbac"] = rb
	}
	return s
}

// oracleSecretName renames the SDS secret of a Gateway API certificateRef,
// Istio's kubernetes-gateway://NAMESPACE/NAME (a Kubernetes Secret), to
// vmesh's kubernetes://NAME: the router VM's file credential of the
// Secret's name (tools/istio-xds-oracle README, the Gateway API corpus's
// mapping; normalisation rule 1). Other names are kept.
func oracleSecretName(n string) string {
	if rest, ok := strings.CutPrefix(n, "kubernetes-gateway://"); ok {
		_, name, _ := strings.Cut(rest, "/")
		return "kubernetes://" + name
	}
	return n
}

// oracleTypedConfigs returns the typed configs (without @type) of the
// filters named name (after oracleFilterName), in order.
func oracleTypedConfigs(filters []any, name string) []any {
	var out []any
	for _, f := range filters {
		fo := oracleObj(f)
		if oracleFilterName(oracleStr(fo["name"])) != name {
			continue
		}
		c := oracleJsonObj{}
		for k, v := range oracleObj(fo["typedConfig"]) {
			if k != "@type" {
				c[k] = v
			}
		}
		out = append(out, c)
	}
	return out
}

// rbacConfigs returns the typed configs of the RBAC filters among filters
// (HTTP or network), in order, for a full comparison of the
// AuthorizationPolicy translation: action, policies (permissions and
// principals, canonicalised by rbacCanon), shadow rules and their stat
// prefix. The filter's own statPrefix is dropped, and Istio's
// shadowRulesStatPrefix on a filter without shadow rules (it sets it on
// every RBAC filter).
func oracleRbacConfigs(filters []any) oracleJsonObj {
	out := oracleJsonObj{}
	for _, f := range filters {
		fo := oracleObj(f)
		if !strings.HasPrefix(oracleFilterName(oracleStr(fo["name"])), "envoy.filters.http.rbac") && !strings.HasPrefix(oracleFilterName(oracleStr(fo["name"])), "envoy.filters.network.rbac") {
			continue
		}
		tc := oracleObj(fo["typedConfig"])
		c := oracleJsonObj{}
		for k, v := range tc {
			if k != "@type" {
				c[k] = oracleRbacCanon(v)
			}
		}
		if c["shadowRules"] == nil {
			delete(c, "shadowRulesStatPrefix")
		}
		// Keyed by action (ALLOW is the enum's zero value, absent in JSON),
		// "shadow " + action for a filter with shadow rules only.
		key := "ALLOW"
		if r := oracleObj(c["rules"]); r != nil {
			if a := oracleStr(r["action"]); a != "" {
				key = a
			}
		} else if r := oracleObj(c["shadowRules"]); r != nil {
			key = "shadow ALLOW"
			if a := oracleStr(r["action"]); a != "" {
				key = "shadow " + a
			}
		}
		for out[key] != nil {
			key += "+"
		}
		delete(c, "statPrefix")
		out[key] = c
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// rbacCanon canonicalises RBAC boolean trees: an and/or of one element is
// that element, an and (or) directly inside an and (or) is merged into it,
// and the elements of an and/or are sorted (both commute). Istio wraps every rule and principal (andRules{rules:[{any:true}]});
// vmesh writes the element itself.
func oracleRbacCanon(v any) any {
	switch x := v.(type) {
	case oracleJsonObj:
		for k, e := range x {
			x[k] = oracleRbacCanon(e)
		}
		for _, op := range [][2]string{{"andRules", "rules"}, {"orRules", "rules"}, {"andIds", "ids"}, {"orIds", "ids"}} {
			inner := oracleObj(x[op[0]])
			if len(x) != 1 || inner == nil {
				continue
			}
			elems := oracleList(inner[op[1]])
			var flat []any
			for _, e := range elems {
				if sub := oracleObj(oracleObj(e)[op[0]]); sub != nil && len(oracleObj(e)) == 1 {
					flat = append(flat, oracleList(sub[op[1]])...)
				} else {
					flat = append(flat, e)
				}
			}
			if len(flat) == 1 {
				return flat[0]
			}
			sort.Slice(flat, func(i, j int) bool { return oracleShort(flat[i]) < oracleShort(flat[j]) })
			inner[op[1]] = flat
		}
	case []any:
		for i, e := range x {
			x[i] = oracleRbacCanon(e)
		}
	}
	return v
}

// istioOracleKnown lists the differences left after normalisation, each with
// its reason; tools/istio-xds-oracle/README.md has the same list with the
// Istio and vmesh values. Fields: proxy kind, type, resource, path, case
// (regular expressions, anchored; empty matches anything).
var istioOracleKnown = []oracleKnown{
	// ---- both kinds: route domains ----
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^\]]*\]/domains/.*\.(:\d+)?`,
		Reason: "Istio also lists each FQDN with a trailing dot (host. and host.:port) for proxyless clients; vmesh does not (grpc-go matches the name it dialled, which has no trailing dot)"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^\]]*\]/domains/[0-9.]+(:\d+)?`,
		Reason: "Istio lists the service's VIP (and VIP:port) as proxyless domains; vmesh does not (grpc-go matches the dialled name)"},
	{Proxy: "sidecar", Type: "RDS", Path: `/virtualHosts\[[^\]]*\]/domains/240\.240\.[0-9.]+(:\d+)?`,
		Reason: "vmesh auto-allocates a 240.240/16 VIP for a ServiceEntry without addresses and lists it; Istio (no DNS auto-allocation here) has none"},
	{Type: "RDS", Path: `/virtualHosts\[[^\]]*\]/domains/(www|edition|regex|c-weighted|fault|weighted|api)(:\d+)?`,
		Reason: "vmesh adds the first label of a non-Kubernetes host (www for www.googleapis.com) as a short domain; Istio adds short names only for <name>.<ns>.svc.<domain> hosts"},
	{Type: "RDS", Path: `/virtualHosts\[[^\]]*\]/domains/weighted\.static(\.svc)?(:\d+)?`, Case: `testdata-static-weighted-se`,
		Reason: "host weighted.static.svc.cluster.local declared in namespace default: Istio takes short names from the host's own form (namespace static), vmesh from the declaring namespace"},
	// ---- proxyless gRPC ----
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^\]]*\]/domains/(zipkin\.istio-system|opentelemetry-collector\.(observability|otel-collector|istio-system))(\.svc)?(:\d+)?`, Case: `telemetry-(zipkin|otel)-meshconfig|docs-telemetry-.*|docs-access-log-otel-meshconfig|testdata-telemetry-.*`,
		Reason: "a service of another namespace (the collectors the telemetry cases send spans and logs to): Istio also lists name.ns and name.ns.svc (with and without port) as proxyless domains, vmesh lists the FQDN (grpc-go matches the name it dialled)"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts`, Resource: `(www\.googleapis\.com|edition\.cnn\.com|api\.dropboxapi\.com|api\.facebook\.com|api\.partner\.example):443|mydbserver\.prod\.svc\.cluster\.local:5443|tcp-echo\.default\.svc\.cluster\.local:900[01]|my-mongo\.tcp\.svc:27017|mymongodb\.somedomain:27018|mongodb\.default\.svc\.cluster\.local:27017`,
		Reason: "non-HTTP port (HTTPS, TCP, MONGO): Istio's route builder makes no virtual host for it (the proxyless route configuration is empty), vmesh routes it as for HTTP"},
	{Proxy: "grpc", Type: "CDS", Resource: `outbound\|\d+\|\|(www\.googleapis\.com|edition\.cnn\.com|api\.dropboxapi\.com|api\.facebook\.com|api\.partner\.example|mydbserver\.prod\.svc\.cluster\.local)`, Path: `/(type|edsClusterConfig|loadAssignment)`,
		Reason: "DNS ServiceEntry: Istio's grpcgen serves an EDS cluster (endpoint = the host name), vmesh a LOGICAL_DNS cluster (grpc-go resolves it; EDS addresses must be IPs)"},
	{Proxy: "grpc", Type: "EDS", Resource: `outbound\|\d+\|\|(www\.googleapis\.com|edition\.cnn\.com|api\.dropboxapi\.com|api\.facebook\.com|api\.partner\.example|mydbserver\.prod\.svc\.cluster\.local)`, Path: ``,
		Reason: "DNS ServiceEntry: Istio serves EDS with the host name as address; vmesh's LOGICAL_DNS cluster has no EDS"},
	{Proxy: "grpc", Type: "CDS", Path: `/outlierDetection`,
		Reason: "Istio's grpcgen ignores DestinationRule outlierDetection; vmesh maps it (grpc-go implements outlier detection)"},
	{Proxy: "grpc", Type: "CDS", Path: `/loadBalancingPolicy`,
		Reason: "LEAST_REQUEST: both send lb_policy LEAST_REQUEST; vmesh also lists load_balancing_policy [least_request, round_robin] (gRFC A52, first supported wins) so grpc-node, which has no least request and rejects the lb_policy, balances round robin instead of dropping the cluster"},
	{Proxy: "grpc", Type: "CDS", Path: `/transportSocket`, Case: `docs-peerauthn-modes|testdata-peer-authn-strict|docs-meshconfig-mesh-mtls`,
		Reason: "vmesh's proxyless automatic mTLS to STRICT endpoints with service accounts (xds/README); Istio's grpcgen sets TLS only from an ISTIO_MUTUAL DestinationRule"},
	{Proxy: "grpc", Type: "CDS", Path: `/transportSocket`, Resource: `outbound\|(80|443)\|\|(www\.googleapis\.com|edition\.cnn\.com)`,
		Reason: "DestinationRule tls SIMPLE: Istio's grpcgen ignores it (plaintext), vmesh sends TLS through certificate-provider instance default"},
	{Proxy: "grpc", Type: "CDS", Path: `/transportSocket`, Resource: `outbound\|80\|\|api\.partner\.example|outbound\|5443\|\|mydbserver\.prod\.svc\.cluster\.local`, Case: `docs-destinationrule-tls-files`, Istio: `absent`,
		Reason: "DestinationRule tls SIMPLE / MUTUAL with certificate files: Istio's grpcgen ignores it (plaintext), vmesh sends TLS through certificate-provider instance default (grpc-go reads certificates from its bootstrap's provider instances, not from file paths in xDS; xds/README)"},
	{Proxy: "grpc", Type: "LDS-inbound", Path: `/filterChains/\{\}/hcm/rbac/ALLOW/rules/policies/[^/]*/principals\[\d+\]/(authenticated|orIds)`, Case: `docs-authz-td-migration`,
		Reason: "a principal of an old trust domain kept as trustDomainAliases: Istio's grpcgen builds proxyless RBAC without its trust domain migration (its Envoy generator has it), so the server allows old-td/... only; vmesh migrates for both proxy kinds, as Istio's Envoy sidecars (new-td/... and old-td/...)"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^\]]*\]/routes\[0\]/route/hashPolicy`, Case: `docs-destinationrule-reference`,
		Reason: "consistentHash httpCookie: Istio sends a cookie hash policy (grpc-go ignores it), vmesh omits it"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^\]]*\]/routes\[0\]/route/hashPolicy\[0\]/(connectionProperties|filterState)`, Case: `docs-consistent-hash-header`,
		Reason: "useSourceIp: Istio sends connection_properties.source_ip (grpc-go does not support it), vmesh filter_state io.grpc.channel_id (per-channel affinity)"},
	// ---- Envoy sidecar: listeners ----
	{Proxy: "sidecar", Type: "LDS", Resource: `0\.0\.0\.0_(443|5443)|240\.240\.[0-9.]+_(443|5443)`, Path: ``,
		Reason: "HTTPS or TCP port of a DNS ServiceEntry: Istio listens on 0.0.0.0_PORT, vmesh on the ServiceEntry's auto-allocated VIP"},
	{Proxy: "sidecar", Type: "LDS", Resource: `192\.0\.2\.2[01]_443`, Path: `/filterChains/\{("prefixRanges":\[\{"addressPrefix":"192\.0\.2\.0","prefixLen":24\}\],)?"serverNames":\["api\.facebook\.com"\]\}`, Case: `testdata-se-example-sni-vip`,
		Reason: "tls match without destinationSubnets after one with them: Istio's chain for it keeps the earlier match's subnets (its loop overwrites the service's CIDRs with a match's and never restores them), vmesh's matches its own (none)"},
	{Proxy: "sidecar", Type: "LDS", Resource: `virtualInbound`, Path: `/filterChains/\{"destinationPort":\d+,"transportProtocol":"tls"\}`,
		Reason: "PERMISSIVE: vmesh has a chain for non-mesh TLS on the service port (tcp_proxy to the inbound cluster under the network RBAC); Istio sends non-mesh TLS to its catch-all TLS chain (tcp_proxy to InboundPassthroughCluster)"},
	{Proxy: "sidecar", Type: "LDS", Resource: `virtualInbound`, Path: `/(filterChains/\{.*\}|defaultFilterChain)/tls/clientChecks/subjectAltNames/prefix:spiffe://[^/]+/`, Istio: `"any"`, Vmesh: `"URI"`,
		Reason: "inbound mesh mTLS accepts a client's SPIFFE ID from the mesh's trust domain and its aliases (prefix spiffe://TD/): Istio matches the prefix against SANs of any type (deprecated match_subject_alt_names), vmesh against URI SANs (a SPIFFE ID is a URI SAN; as for exact SPIFFE IDs in clusters)"},
	// ---- Envoy sidecar: AuthorizationPolicy (RBAC filters of the inbound chains) ----
	{Proxy: "sidecar", Type: "LDS", Resource: `virtualInbound`, Path: `/filterChains/\{("alpn":"istio",)?"transportProtocol":"(tls|raw_buffer)"\}/(filters\[[01]\]|rbac)`, Case: `authz-custom-ext-authz`,
		Reason: "CUSTOM with an HTTP ext_authz provider, mesh mTLS to a port that is no service port: Istio's passthrough chain applies nothing, vmesh denies what the policy's rules match (it cannot ask an HTTP provider about a TCP connection: fail closed, as on its TCP ports)"},
	{Proxy: "sidecar", Type: "LDS", Resource: `virtualInbound`, Path: `/filterChains/\{[^}]*\}/(hcm/)?rbac/ALLOW/rules/policies(/ns\[default\]-policy\[allow-nothing\]-rule\[0\])?`, Case: `docs-authz-http`,
		Reason: "ALLOW policy without rules (allow-nothing): Istio adds a policy matching nothing (not any), vmesh adds none; both allow nothing"},
	{Proxy: "sidecar", Type: "LDS", Resource: `virtualInbound`, Path: `/filterChains/\{[^}]*\}/(hcm/)?rbac/(ALLOW|DENY)/rules/policies/[^/]*/principals\[\d+\]/(andIds/ids\[\d+\]/)?(orIds/ids\[\d+\]|notId)/authenticated/principalName/safeRegex/regex`,
		Reason: "namespaces / notNamespaces: Istio matches the principal with .*/ns/<ns>/.*, vmesh with spiffe://[^/]+/ns/<ns>/sa/[^/]+ (stricter, same for SPIFFE IDs)"},
	{Proxy: "sidecar", Type: "LDS", Resource: `virtualInbound`, Path: `/filterChains/\{[^}]*\}/hcm/rbac/ALLOW/rules/policies/ns\[default\]-policy\[httpbin(-3)?\]-rule\[\d\]/permissions\[\d+\]/(andRules/rules\[\d+\]/)?orRules/rules\[\d+\]`, Case: `authz-multiple-policies|authz-single-policy`,
		Reason: "hosts: Istio matches :authority exactly (ignoring case), vmesh also accepts host:port (prefix host:)"},
	{Proxy: "sidecar", Type: "LDS", Resource: `virtualInbound`, Path: `/filterChains/\{[^}]*\}/hcm/rbac/ALLOW/rules/policies/[^/]*/principals\[\d+\]/(andIds/ids\[\d+\]/)?orIds/ids\[\d+\]/header/name`, Case: `authz-multiple-policies|authz-single-policy`,
		Reason: "when request.headers[X-abc]: a principal in both (as in Istio since vmesh's JWT work), vmesh lowercases the header name (grpc-go looks metadata keys up as written; Envoy ignores case)"},
	// ---- proxyless gRPC server listeners (AuthorizationPolicy) ----
	{Proxy: "grpc", Type: "LDS-inbound", Path: `/filterChains/\{\}/hcm/rbac/(shadow )?(ALLOW|DENY)`, Case: `authz-dry-run-allow|authz-dry-run-allow-and-deny`,
		Reason: "istio.io/dry-run on a proxyless server: Istio's grpcgen ignores the annotation and enforces the policy, vmesh emits shadow rules (istio_dry_run_*) and enforces nothing, as Istio does for Envoy"},
	{Proxy: "grpc", Type: "LDS-inbound", Path: `/filterChains/\{\}/hcm/rbac/ALLOW/rules/policies(/default-httpbin-6-0)?`, Case: `authz-single-policy|authz-multiple-policies|requestauthn-.*`,
		Reason: "requestPrincipals (no JWT on proxyless servers): Istio keeps the ALLOW rule with jwt_authn metadata matchers (never match), vmesh drops the rule; same effect"},
	{Proxy: "grpc", Type: "LDS-inbound", Path: `/filterChains/\{\}/hcm/rbac/ALLOW/rules/policies/default-httpbin-9-0/principals\[\d+\]/(andIds/ids\[\d+\]/)?orIds/ids\[\d+\]/header/name`, Case: `authz-multiple-policies`,
		Reason: "when request.headers[X-abc]: a principal in both, vmesh lowercases the header name (grpc-go looks metadata keys up as written)"},
	{Proxy: "grpc", Type: "LDS-inbound", Path: `/filterChains/\{\}/hcm/rbac/(ALLOW|DENY)/rules/policies/[^/]*/principals\[\d+\]/(andIds/ids\[\d+\]/)?(orIds/ids\[\d+\]|notId)/authenticated/principalName/safeRegex/regex`,
		Reason: "namespaces / notNamespaces: Istio matches the principal with .*/ns/<ns>/.*, vmesh with spiffe://[^/]+/ns/<ns>/sa/[^/]+ (stricter, same for SPIFFE IDs)"},
	{Proxy: "grpc", Type: "LDS-inbound", Path: `/filterChains/\{\}/hcm/rbac/ALLOW/rules/policies/default-httpbin-3-0/permissions\[0\]/orRules/rules\[\d+\]`, Case: `authz-multiple-policies`,
		Reason: "hosts: Istio matches :authority exactly (ignoring case), vmesh also accepts host:port (prefix host:)"},
	{Proxy: "grpc", Type: "LDS-inbound", Path: `/filterChains/\{\}/hcm/(rbac|httpFilters\[[01]\])`, Case: `authz-custom-.*`,
		Reason: "CUSTOM on a proxyless server: Istio's grpcgen ignores the policy (what it matches is allowed); vmesh denies what it matches (grpc-go has no ext_authz: fail closed, VM1005)"},
	// ---- Envoy sidecar: Telemetry metrics ----
	{Proxy: "sidecar", Type: "LDS", Path: `/(filterChains/\{[^}]*\}|defaultFilterChain)/(hcm/)?istioStats`, Case: `docs-telemetry-metrics|testdata-telemetry-valid-full`,
		Reason: "Telemetry metrics (a prometheus provider, tag overrides, disabled metrics, reportingInterval): Istio's stats filter istio.stats carries Istio's metrics and their overrides; it is in Istio's Envoy build only, upstream Envoy has none, so vmesh's proxies export Envoy's own statistics unchanged and vmesh warns each metrics field (VM1023)"},
	// ---- Envoy sidecar: routes ----
	{Proxy: "router|sidecar", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/routes\[\d+\]/redirect/pathRedirect`, Case: `gwapi-.*`, Istio: `""`,
		Reason: "Gateway API redirect without a path: Istio sets path_redirect to \"\" (Envoy keeps the request's path for an empty one), vmesh leaves it unset (keeps the path)"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/routes\[\d+\]/match/(pathSeparatedPrefix|prefix)`, Case: `gwapi-mesh-grpcroute-matching`,
		Reason: "a GRPCRoute's service match (service without method) for a proxyless client: Istio path_separated_prefix /svc, vmesh prefix /svc/; grpc-go (1.85, unmarshal_rds.go) refuses a route configuration with a path specifier it does not know, so Istio's would be NACKed, and on a gRPC path (always /service/method) the prefix selects the same calls"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/routes\[\d+\]/match/(pathSeparatedPrefix|safeRegex)`, Case: `gwapi-.*`,
		Reason: "Gateway API PathPrefix /p for a proxyless client: Istio path_separated_prefix /p, vmesh safe_regex /p(/.*)? on the path (the same paths: /p and /p/...; grpc-go has no path_separated_prefix; vmesh's Envoy routes use path_separated_prefix as Istio's)"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/routes\[\d+\]/route/(prefixRewrite|regexRewrite)`, Case: `gwapi-mesh-.*`,
		Reason: "URLRewrite path for a proxyless client: grpc-go has no path rewrite (xds/README), so vmesh's grpc-go routes leave it out; Istio sends Envoy's prefix_rewrite / regex_rewrite"},
	{Proxy: "router", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/routes\[\d+\]/route/weightedClusters/clusters\[(UnknownService|outbound\|\d+\|\|UnknownService\.[^]]*)\]`, Case: `gwapi-.*`,
		Reason: "a backendRef that cannot be used (no ReferenceGrant) keeps its weight: Istio's cluster is named UnknownService, vmesh's outbound|PORT||UnknownService.NS.svc.cluster.local (the host qualified as any); neither proxy has it, so its share of the requests answers 500 in both (cluster_not_found_response_code)"},
	{Proxy: "router", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/routes\[\d+\]/route/cluster`, Case: `gwapi-.*`, Istio: `"UnknownService"`, Vmesh: `"outbound\|\d+\|\|UnknownService\.[^"]*"`,
		Reason: "a rule whose only backendRef cannot be used (an unknown kind, no ReferenceGrant): both route to a cluster no proxy has, Istio's named UnknownService, vmesh's outbound|PORT||UnknownService.NS.svc.cluster.local (the host qualified as any); both answer 500 (cluster_not_found_response_code), as the Gateway API asks"},
	{Proxy: "router", Type: "RDS", Path: `/virtualHosts\[very\.specific\.com:80\]/routes\[[01]\]/(match/pathSeparatedPrefix|route/cluster)`, Case: `gwapi-httproute-hostname-intersection`,
		Reason: "two routes of one virtual host from HTTPRoutes of different hostnames (very.specific.com, *.specific.com), with disjoint matches (prefixes /s1 and /s3: no request matches both), in another order: Istio orders them by its merged VirtualServices' names, vmesh by the Gateway API's precedence (equal-length prefixes: the routes' namespace/name); the same requests reach the same backends"},
	{Proxy: "router", Type: "LDS", Resource: `0\.0\.0\.0_9443`, Path: ``, Case: `gwapi-istio-tls-terminate`, Istio: `absent`,
		Reason: "a listener port the Gateway's Service does not expose: Istio's testdata Gateway names its Service by addresses (a manual deployment, istio-ingressgateway with ports 80, 443, 34000, 34001), and Istio's gateway listens only on the ports of its Service; a VM has no Service in front, vmesh's router listens on every listener's port (and warns that addresses are not applied, VM1021)"},
	{Proxy: "router", Type: "LDS", Path: `/filterChains/\{[^}]*\}/tcpProxy`, Case: `gwapi-.*`, Istio: `"UnknownService"`,
		Reason: "a TCPRoute's or TLSRoute's backendRef that cannot be used (no ReferenceGrant, an unknown kind) keeps its place: Istio's tcp_proxy cluster is named UnknownService (its converter leaves the destination empty), vmesh's outbound|PORT||UnknownService.NS.svc.cluster.local (the host qualified as any); neither proxy has it, so the connections fail in both"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/routes\[\d+\]/match/prefix`, Case: `gwapi-mesh-.*`, Istio: `absent`,
		Reason: "a rule vmesh's proxyless routes skip (a redirect: grpc-go has none) shifts the routes after it by one, so vmesh's catch-all prefix / sits where Istio's path_separated_prefix route was (the other fields of that route are listed as the redirect's)"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/routes\[\d+\](/match/(headers|queryParameters|pathSeparatedPrefix|safeRegex))?`, Case: `gwapi-mesh-httproute-query-param-matching`,
		Reason: "matches on query parameters for a proxyless client: grpc-go ignores a route with query parameter matchers (gRPC has no query), so vmesh leaves those routes out and Istio sends them; the routes after them shift, and grpc-go serves the same routes from both"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/routes\[\d+\]/route/clusterNotFoundResponseCode`, Case: `gwapi-mesh-.*`,
		Reason: "Gateway API routes: Istio also sets cluster_not_found_response_code 500 for proxyless clients; vmesh only for Envoy (grpc-go ignores the field: a call to a cluster it lacks fails UNAVAILABLE either way)"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/domains/[^.]+\.[^.:]+(\.svc)?(:\d+)?`, Case: `gwapi-mesh-.*`,
		Reason: "service of another namespace (gateway-conformance-mesh; the client is in default): Istio also lists name.ns and name.ns.svc (with and without port) as proxyless domains, vmesh lists the FQDN (grpc-go matches the name it dialled)"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts`, Resource: `echo(-v[12])?\.gateway-conformance-mesh\.svc\.cluster\.local:(443|9090)`, Case: `gwapi-mesh-.*`,
		Reason: "non-HTTP port (HTTPS 443, TCP 9090 of the conformance echo services): Istio's route builder makes no virtual host for it (the proxyless route configuration is empty), vmesh routes it as for HTTP"},
	{Proxy: "grpc", Type: "RDS", Path: `/virtualHosts\[[^]]*\]/routes\[\d+\](/(redirect|route|requestHeadersToAdd|requestHeadersToRemove|responseHeadersToAdd|responseHeadersToRemove))?`, Case: `gwapi-mesh-.*`,
		Reason: "proxyless gRPC: vmesh's routes for grpc-go leave out what grpc-go has no equivalent for (xds/grpc/routes.go, xds/README): redirects (the route is skipped: grpc-go fails a call that matches one) and header modifiers; Istio sends them as for Envoy"},
	// ---- Envoy sidecar: clusters ----
	{Proxy: "sidecar", Type: "CDS", Resource: `inbound\|9082\|\|`, Path: `/upstreamBindConfig`, Case: `docs-sidecar-ingress-endpoints`,
		Reason: "Sidecar ingress defaultEndpoint unix://: Istio binds the inbound cluster to 127.0.0.6 as for an IP endpoint, vmesh binds nothing (no capture sees a unix socket, and an IP source address cannot be bound to one)"},
	{Proxy: "sidecar|router", Type: "CDS", Path: `.*/commonTlsContext/subjectAltNames/spiffe://.*`, Istio: `"any"`, Vmesh: `"URI"`,
		Reason: "SAN check of a SPIFFE ID: Istio matches it as a SAN of any type (deprecated match_subject_alt_names), vmesh as a URI SAN (a spiffe:// name is no valid DNS name, email address or IP address; other names match any type on both)"},
	{Proxy: "sidecar|router", Type: "CDS", Resource: `outbound\|443\|\|www\.googleapis\.com|outbound\|80\|\|edition\.cnn\.com|outbound\|443\|\|edition\.cnn\.com`, Path: `/transportSocket/typedConfig/commonTlsContext/(combinedValidationContext|validationContext)`,
		Reason: "DestinationRule tls SIMPLE without caCertificates: both verify the server against the system roots; Istio names them through its agent's SDS (file-root:system), vmesh points Envoy at the file (/etc/ssl/certs/ca-certificates.crt)"},
}
