// Command istio-mcp-client runs Istio's own ADS client for config sources
// (pkg/adsc, configured as istiod's initConfigSources configures it for a
// configSources entry xds://ADDRESS) against a running `vmesh serve`, and
// checks that it receives every object vmesh's /debug/config shows:
//
//	istio-mcp-client -vmesh BIN -repo ROOT [-out DIR]
//
// Step 1 serves the bundled quickstart (ROOT/examples/quickstart/config)
// and saves what Istio's client decoded, objects per type URL as canonical
// JSON, to DIR/quickstart.json (xds/testdata/istio-mcp): vmesh's test
// TestMCPMatchesIstioClient checks vmesh still serves exactly that. Step 2
// serves the quickstart from a git repository, then commits a change to
// its VirtualService: Istio's client must receive the change, at a version
// naming the new commit, and again hold exactly /debug/config; the commits,
// those versions and what it then held are saved to DIR/git-change.json,
// which vmesh's TestMCPVersionNamesTheCommit compares its own server with.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	mcp "istio.io/api/mcp/v1alpha1"
	"istio.io/istio/pilot/pkg/config/memory"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pkg/adsc"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/collections"
)

// object is one object as Istio's client decoded it into its config
// store: the MCP name namespace/name, labels, annotations, and the spec as
// canonical JSON. vmesh's test decodes its own server's responses into the
// same form.
type object struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Spec        json.RawMessage   `json:"spec"`
}

// decoded is what a client holds: objects by type URL (every type of
// collections.Pilot, the types istiod asks for), sorted by name; and, in
// what is saved, the objects received that Istio's config store refused.
type decoded struct {
	Types   map[string][]object `json:"types"`
	Refused []refusal           `json:"refused,omitempty"`
}

// gitChange is what step 2 saves (git-change.json): the two commits, the
// VirtualService type's version_info Istio's client held at each, and
// every object it held after the second commit, by type URL.
type gitChange struct {
	Commits  []string            `json:"commits"`
	Versions []string            `json:"versions"`
	Types    map[string][]object `json:"types"`
}

// refusal is an object the client received but its config store refused
// on Create: "TYPE-URL namespace/name" and Istio's validation error.
type refusal struct {
	Object string `json:"object"`
	Reason string `json:"reason"`
}

func main() {
	bin := flag.String("vmesh", "", "vmesh binary")
	repo := flag.String("repo", "../..", "vmesh repository root (for examples/quickstart/config)")
	out := flag.String("out", "", "directory to save quickstart.json in (xds/testdata/istio-mcp); empty saves nothing")
	flag.Parse()
	if err := run(*bin, *repo, *out); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
}

func run(bin, repo, out string) error {
	if bin == "" {
		return errors.New("-vmesh is required")
	}
	quickstart := filepath.Join(repo, "examples", "quickstart", "config")
	tmp, err := os.MkdirTemp("", "istio-mcp-client")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	// Step 1: the quickstart from a directory.
	v, err := startVmesh(bin, tmp, "dir", "--config-dir", quickstart)
	if err != nil {
		return err
	}
	c, err := newClient(v.xds)
	if err != nil {
		v.stop()
		return err
	}
	got, err := c.waitEqual(v, func(map[string]string) bool { return true })
	if err == nil {
		got.Refused, err = c.refused(got)
	}
	c.close()
	v.stop()
	if err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	n := 0
	for _, l := range got.Types {
		n += len(l)
	}
	fmt.Printf("quickstart (directory): Istio's client received %d objects of %d types, equal to vmesh's /debug/config\n", n, len(got.Types))
	for _, r := range got.Refused {
		fmt.Printf("  refused by Istio's config store (its validation): %s: %s\n", r.Object, r.Reason)
	}
	if out != "" {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "quickstart.json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}

	// Step 2: the quickstart from git, then a commit's change.
	gitDir := filepath.Join(tmp, "repo")
	if err := os.CopyFS(gitDir, os.DirFS(quickstart)); err != nil {
		return err
	}
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Dir = gitDir
		b, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %v: %w: %s", args, err, b)
		}
		return strings.TrimSpace(string(b)), nil
	}
	for _, a := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-qm", "quickstart"}} {
		if _, err := git(a...); err != nil {
			return err
		}
	}
	first, _ := git("rev-parse", "HEAD")
	v, err = startVmesh(bin, tmp, "git", "--git-repo", gitDir, "--git-ref", "main", "--git-interval", "500ms")
	if err != nil {
		return err
	}
	defer v.stop()
	c, err = newClient(v.xds)
	if err != nil {
		return err
	}
	defer c.close()
	names := func(commit string) func(map[string]string) bool {
		return func(versions map[string]string) bool {
			vs := versions["networking.istio.io/v1/VirtualService"]
			return strings.HasSuffix(vs, "@"+commit[:12])
		}
	}
	if _, err := c.waitEqual(v, names(first)); err != nil {
		return fmt.Errorf("git: %w", err)
	}
	before := c.version("networking.istio.io/v1/VirtualService")
	fmt.Printf("git commit %.12s: Istio's client received every object of /debug/config, VirtualService version %s\n", first, before)
	b, err := os.ReadFile(filepath.Join(gitDir, "greeter.yaml"))
	if err != nil {
		return err
	}
	changed := strings.Replace(string(b), "weight: 80", "weight: 70", 1)
	changed = strings.Replace(changed, "weight: 20", "weight: 30", 1)
	if changed == string(b) {
		return errors.New("greeter.yaml: no weights 80/20 to change")
	}
	if err := os.WriteFile(filepath.Join(gitDir, "greeter.yaml"), []byte(changed), 0o644); err != nil {
		return err
	}
	if _, err := git("commit", "-qam", "greeter: 70/30"); err != nil {
		return err
	}
	second, _ := git("rev-parse", "HEAD")
	after, err := c.waitEqual(v, names(second))
	if err != nil {
		return fmt.Errorf("git change: %w", err)
	}
	vsJSON, _ := json.Marshal(after.Types["networking.istio.io/v1/VirtualService"])
	if !strings.Contains(string(vsJSON), `"weight":70`) {
		return fmt.Errorf("git change: Istio's client holds %s, want weight 70", vsJSON)
	}
	fmt.Printf("git commit %.12s (weights 80/20 -> 70/30): Istio's client received the change, VirtualService version %s, every type equal to /debug/config\n", second, c.version("networking.istio.io/v1/VirtualService"))
	if out != "" {
		saved := gitChange{Commits: []string{first, second}, Versions: []string{before, c.version("networking.istio.io/v1/VirtualService")}, Types: after.Types}
		b, err := json.MarshalIndent(saved, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "git-change.json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	fmt.Println("PASS")
	return nil
}

// vmesh is a running `vmesh serve`.
type vmesh struct {
	cmd       *exec.Cmd
	http, xds string
}

func (v *vmesh) stop() { _ = v.cmd.Process.Kill(); _ = v.cmd.Wait() }

func startVmesh(bin, tmp, name string, args ...string) (*vmesh, error) {
	httpAddr, xdsAddr, secAddr := freeAddr(), freeAddr(), freeAddr()
	args = append([]string{"serve", "--data-dir", filepath.Join(tmp, "data-"+name), "--http-addr", httpAddr, "--xds-addr", xdsAddr,
		"--secure-addr", secAddr, "--mcp-plaintext"}, args...)
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(filepath.Join(tmp, "vmesh-"+name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	v := &vmesh{cmd: cmd, http: httpAddr, xds: xdsAddr}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return v, nil
			}
		}
		if time.Now().After(deadline) {
			v.stop()
			log, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("vmesh serve not ready: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// client is Istio's config-source client, as istiod makes one for
// configSources: adsc with ConfigInitialRequests, node metadata
// GENERATOR=api, plaintext, over an in-memory config controller.
type client struct {
	adsc  *adsc.ADSC
	store *memory.Controller
	stop  chan struct{}
}

func newClient(addr string) (*client, error) {
	a, err := adsc.New(addr, &adsc.ADSConfig{
		InitialDiscoveryRequests: adsc.ConfigInitialRequests(),
		Config: adsc.Config{
			Namespace: "istio-system",
			Workload:  "istiod-mcp-client",
			Meta:      model.NodeMetadata{Generator: "api"}.ToStruct(),
			GrpcOpts:  []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		},
	})
	if err != nil {
		return nil, err
	}
	store := memory.NewController(memory.Make(collections.Pilot))
	store.RegisterHasSyncedHandler(a.HasSynced)
	a.Store = store
	c := &client{adsc: a, store: store, stop: make(chan struct{})}
	go store.Run(c.stop)
	if err := a.Run(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *client) close() { close(c.stop); c.adsc.Close() }

func (c *client) version(typeURL string) string {
	r := c.adsc.Received[typeURL]
	if r == nil {
		return ""
	}
	return r.GetVersionInfo()
}

// held returns what the client's store holds, by type URL.
func (c *client) held() (decoded, error) {
	d := decoded{Types: map[string][]object{}}
	for _, s := range collections.Pilot.All() {
		gvk := s.GroupVersionKind()
		l := []object{}
		for _, cfg := range c.store.List(gvk, "") {
			m, ok := cfg.Spec.(proto.Message)
			if !ok {
				return d, fmt.Errorf("%s %s/%s: spec %T is not a message", gvk, cfg.Namespace, cfg.Name, cfg.Spec)
			}
			spec, err := canonical(m)
			if err != nil {
				return d, err
			}
			ann := map[string]string{}
			for k, v := range cfg.Annotations {
				if k != memory.ResourceVersion { // the store's own bookkeeping of an update
					ann[k] = v
				}
			}
			if len(ann) == 0 {
				ann = nil
			}
			l = append(l, object{Name: cfg.Namespace + "/" + cfg.Name, Labels: cfg.Labels, Annotations: ann, Spec: spec})
		}
		slices.SortFunc(l, func(a, b object) int { return strings.Compare(a.Name, b.Name) })
		d.Types[gvk.String()] = l
	}
	return d, nil
}

// received returns what the client received, by type URL: the resources
// of the last response of each type, decoded as adsc decodes them
// (istio.mcp.v1alpha1.Resource, its body unpacked into Istio's message).
// Its config store may then refuse some by Istio's validation (held).
func (c *client) received() (decoded, error) {
	d := decoded{Types: map[string][]object{}}
	for _, s := range collections.Pilot.All() {
		typ := s.GroupVersionKind().String()
		l := []object{}
		for _, a := range c.adsc.Received[typ].GetResources() {
			r := &mcp.Resource{}
			if err := a.UnmarshalTo(r); err != nil {
				return d, fmt.Errorf("%s: %w", typ, err)
			}
			body, err := r.GetBody().UnmarshalNew()
			if err != nil {
				return d, fmt.Errorf("%s %s: %w", typ, r.GetMetadata().GetName(), err)
			}
			spec, err := canonical(body)
			if err != nil {
				return d, err
			}
			md := r.GetMetadata()
			l = append(l, object{Name: md.GetName(), Labels: md.GetLabels(), Annotations: md.GetAnnotations(), Spec: spec})
		}
		slices.SortFunc(l, func(a, b object) int { return strings.Compare(a.Name, b.Name) })
		d.Types[typ] = l
	}
	return d, nil
}

// refused returns the objects received that the client's config store
// does not hold, with the reason: Istio's validation of the object
// (the check the store's Create makes), run again on what was received.
func (c *client) refused(got decoded) ([]refusal, error) {
	held, err := c.held()
	if err != nil {
		return nil, err
	}
	var out []refusal
	for typ, l := range got.Types {
		for _, o := range l {
			if slices.ContainsFunc(held.Types[typ], func(h object) bool { return h.Name == o.Name && string(h.Spec) == string(o.Spec) }) {
				continue
			}
			reason, err := c.validate(typ, o.Name)
			if err != nil {
				return nil, err
			}
			out = append(out, refusal{Object: typ + " " + o.Name, Reason: reason})
		}
	}
	slices.SortFunc(out, func(a, b refusal) int { return strings.Compare(a.Object, b.Object) })
	return out, nil
}

// validate returns Istio's validation error for the received object of a
// type named namespace/name, as the config store's Create sees it.
func (c *client) validate(typ, name string) (string, error) {
	for _, a := range c.adsc.Received[typ].GetResources() {
		r := &mcp.Resource{}
		if err := a.UnmarshalTo(r); err != nil {
			return "", fmt.Errorf("%s: %w", typ, err)
		}
		if r.GetMetadata().GetName() != name {
			continue
		}
		body, err := r.GetBody().UnmarshalNew()
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", typ, name, err)
		}
		for _, sch := range collections.Pilot.All() {
			if sch.GroupVersionKind().String() != typ {
				continue
			}
			ns, n, _ := strings.Cut(name, "/")
			_, verr := sch.ValidateConfig(config.Config{Meta: config.Meta{GroupVersionKind: sch.GroupVersionKind(), Namespace: ns, Name: n,
				Labels: r.GetMetadata().GetLabels(), Annotations: r.GetMetadata().GetAnnotations()}, Spec: body})
			if verr == nil {
				return "", fmt.Errorf("%s %s: not held by the config store, yet Istio's validation accepts it", typ, name)
			}
			return verr.Error(), nil
		}
	}
	return "", fmt.Errorf("%s %s: not received", typ, name)
}

// waitEqual waits until the client has synced, its versions pass ok and
// it holds exactly what vmesh's /debug/config shows.
func (c *client) waitEqual(v *vmesh, ok func(map[string]string) bool) (decoded, error) {
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		if c.adsc.HasSynced() {
			versions := map[string]string{}
			for _, s := range collections.Pilot.All() {
				versions[s.GroupVersionKind().String()] = c.version(s.GroupVersionKind().String())
			}
			got, err := c.received()
			if err != nil {
				return got, err
			}
			want, err := debugConfig(v.http)
			if err != nil {
				return got, err
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			if string(gb) == string(wb) && ok(versions) {
				return got, nil
			}
			last = fmt.Sprintf("Istio's client holds\n%s\n/debug/config shows\n%s\nversions %v", gb, wb, versions)
		}
		if time.Now().After(deadline) {
			return decoded{}, fmt.Errorf("timed out: %s", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// debugConfig returns /debug/config's objects in the client's form, by the
// type URL of their kind in collections.Pilot.
func debugConfig(addr string) (decoded, error) {
	d := decoded{Types: map[string][]object{}}
	for _, s := range collections.Pilot.All() {
		d.Types[s.GroupVersionKind().String()] = []object{}
	}
	resp, err := http.Get("http://" + addr + "/debug/config")
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return d, err
	}
	var dc struct {
		Objects []struct {
			Kind, Namespace, Name string
			Labels, Annotations   map[string]string
			Spec                  json.RawMessage
		}
	}
	if err := json.Unmarshal(b, &dc); err != nil {
		return d, err
	}
	for _, o := range dc.Objects {
		var typ string
		for _, s := range collections.Pilot.All() {
			if s.Kind() == o.Kind {
				typ = s.GroupVersionKind().String()
			}
		}
		if typ == "" {
			return d, fmt.Errorf("/debug/config holds %s %s/%s, a kind Istio's client does not read", o.Kind, o.Namespace, o.Name)
		}
		spec, err := canonicalJSON(o.Spec)
		if err != nil {
			return d, err
		}
		d.Types[typ] = append(d.Types[typ], object{Name: o.Namespace + "/" + o.Name, Labels: o.Labels, Annotations: o.Annotations, Spec: spec})
	}
	for _, l := range d.Types {
		slices.SortFunc(l, func(a, b object) int { return strings.Compare(a.Name, b.Name) })
	}
	return d, nil
}

func canonical(m proto.Message) (json.RawMessage, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	return canonicalJSON(b)
}

// canonicalJSON re-encodes JSON with sorted keys and no spaces.
func canonicalJSON(b []byte) (json.RawMessage, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}
