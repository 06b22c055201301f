package floors_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/internal/testenv"
)

const module = "github.com/vmesh/vmesh/"

// allowed maps a package prefix (its folder) to the folders of vmesh it may
// import; a package's own folder is always allowed, and the longest prefix
// wins. Test files are not checked: a test may reach up to run the real
// thing.
var allowed = map[string][]string{
	"internal/": {},
	// The Store: what every source and the model share. It imports no
	// source.
	"store":     {"internal/"},
	"filestore": {"store", "gatewayapi", "internal/"},
	// The Kubernetes Gateway API: its kinds' validation (which filestore
	// runs on decoding) and their conversion to Istio objects, which its
	// writer puts in the Store and the analysis runs offline.
	"gatewayapi": {"store", "internal/"},
	"model":      {"store", "gatewayapi", "ca/spiffe", "internal/"},
	"xds":        {"model", "ca/spiffe", "internal/"},
	// What the proxy kinds and the server share (a resource, a group's
	// generation, the kind and cache interfaces): a leaf under both.
	"xds/gen": {"model", "xds/nds", "internal/"},
	// The fixtures the tests of xds and of the kinds share.
	"xds/gen/gentest": {"xds/gen", "model", "store", "internal/"},
	// The node-metadata contract, which agents write and xds reads.
	"xds/node": {},
	// The DNS name table (NDS) message, which xds serves and agents read.
	"xds/nds": {},
	// The MCP server: the Store's objects as Istio's config types, to
	// istiod's configSources client. It reads the Store, not the model.
	"xds/mcp": {"store", "internal/"},
	// The registries (Consul, ZooKeeper, static) write the Store only.
	"registries": {"store", "internal/"},
	// The other writers of the Store: agent registrations, the replicas'
	// shared state, fetched key sets (JWKS).
	"writers": {"store", "model", "internal/"},
	// The shared state carries the CA's revocations between replicas and
	// checks a record as a file (filestore.DecodeFile).
	"writers/sharedstate": {"store", "filestore", "ca", "internal/"},
	"ca":                  {"internal/"},
	"agents":              {"ca/bundle", "ca/spiffe", "xds/node", "xds/nds", "internal/"},
	// Imported by the agents' tests only: a real CA to enrol against.
	"agents/internal/agenttest": {"ca", "internal/"},
	"examples":                  {"examples", "internal/"},
	"cmd":                       {"cmd", "store", "filestore", "gatewayapi", "model", "xds", "registries", "writers", "ca", "agents", "internal/"},
}

// sources are the floors of the Store's writers, side by side over it: the
// config sources (directory, git), the registries and the other writers.
var sources = []string{"filestore", "registries", "writers", "gatewayapi"}

// TestSourcesSideBySide keeps the Store below its sources: the Store
// imports no source (nor the model or xds, which read it), and no source
// or writer imports xds (whatever writes registrations gets the xDS
// server's stream events through the control plane's wiring). Any floor
// within a source's folder counts as that source's.
func TestSourcesSideBySide(t *testing.T) {
	for _, m := range allowed["store"] {
		for _, above := range append([]string{"model", "xds", "cmd"}, sources...) {
			if within(above, m) || within(m, above) {
				t.Errorf("store may import %s: the Store imports no source, nor what reads it", m)
			}
		}
	}
	for prefix, may := range allowed {
		if !slices.ContainsFunc(sources, func(s string) bool { return within(prefix, s) }) {
			continue
		}
		for _, m := range may {
			if within("xds", m) || within(m, "xds") {
				t.Errorf("%s may import %s: no source or writer of the Store imports xds", prefix, m)
			}
		}
	}
}

// TestImportsRunOneWay lists every package's imports with go list and
// checks them against allowed.
func TestImportsRunOneWay(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = testenv.RepoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimPrefix(p.ImportPath, module)
		rule, ok := ruleFor(pkg)
		if !ok {
			t.Errorf("%s: in no floor (add its folder to allowed)", pkg)
			continue
		}
		checked++
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok || within(dep, rule.self) {
				continue
			}
			if !allowedBy(dep, rule.may) {
				t.Errorf("%s imports %s: against the floors (%s may import %v)", pkg, dep, rule.self, rule.may)
			}
		}
	}
	if checked < 30 {
		t.Fatalf("checked %d packages: go list saw too few", checked)
	}
}

type rule struct {
	self string
	may  []string
}

func ruleFor(pkg string) (rule, bool) {
	best := ""
	for prefix := range allowed {
		if within(pkg, prefix) && len(prefix) > len(best) {
			best = prefix
		}
	}
	if best == "" {
		return rule{}, false
	}
	self := best
	if strings.HasSuffix(best, "/") { // internal/x: each leaf is its own floor
		rest := strings.TrimPrefix(pkg, best)
		self = best + strings.Split(rest, "/")[0]
	}
	return rule{self: self, may: allowed[best]}, true
}

// within reports whether pkg is the folder prefix or below it.
func within(pkg, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(pkg, prefix)
	}
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

func allowedBy(dep string, may []string) bool {
	for _, m := range may {
		if within(dep, m) {
			return true
		}
	}
	return false
}
