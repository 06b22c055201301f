package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/xds"
)

// ProxyPage is one proxy's page: its sync state and the config it holds.
type ProxyPage struct {
	ID string
	// Found is false when no proxy with the id is connected.
	Found  bool
	Status []ProxyRow // one per stream (SotW and delta may both be open)
	// Proxy is what its node says; Identity its SPIFFE ID, when it names a
	// service account.
	Proxy    xds.Proxy
	Identity string
	Group    string
	Version  string
	// MCP says the id is an MCP client's (an istiod reading the mesh's
	// config over xDS): Identity is who it was let in as, and it is given
	// the Store's config (/debug/config), not config generated for it.
	MCP bool
	// Resources are the resources its group is given, by type.
	Resources []ResourceType
	// DumpError says why the config could not be read.
	DumpError string
}

// ResourceType is the resources of one type a proxy is given.
type ResourceType struct {
	Type      string
	Resources []Resource
}

// Resource is one xDS resource, as indented JSON.
type Resource struct {
	Name string
	JSON string
}

func (p ProxyPage) title() string { return "Proxy " + p.ID }

// configDump is the JSON of xds.(*Server).ConfigDumpHandler.
type configDump struct {
	Proxy     xds.Proxy                             `json:"proxy"`
	Group     string                                `json:"group"`
	Version   string                                `json:"version"`
	Resources map[string]map[string]json.RawMessage `json:"resources"`
}

// identity is the SPIFFE ID of a namespace's service account.
func (c *Console) identity(namespace, serviceAccount string) string {
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", c.src.TrustDomain, namespace, serviceAccount)
}

func (c *Console) proxy(ctx context.Context, id string) (ProxyPage, int) {
	p := ProxyPage{ID: id}
	if c.src.Syncz != nil {
		for _, s := range c.src.Syncz() {
			if s.ID == id {
				p.Found = true
				p.Status = append(p.Status, c.rowOf(s, sortedTypes(s.Types)))
			}
		}
	}
	if !p.Found {
		return p, http.StatusNotFound
	}
	if st := p.Status[0]; len(p.Status) == 1 && st.MCP {
		p.MCP, p.Identity, p.Group = true, st.Identity, st.Group
		p.Proxy = xds.Proxy{ID: id, Kind: st.Kind, Namespace: st.Namespace}
		return p, http.StatusOK
	}
	dump, err := c.configDump(ctx, id)
	if err != nil {
		p.DumpError = err.Error()
		return p, http.StatusOK
	}
	p.Proxy, p.Group, p.Version = dump.Proxy, dump.Group, dump.Version
	if dump.Proxy.ServiceAccount != "" {
		p.Identity = c.identity(dump.Proxy.Namespace, dump.Proxy.ServiceAccount)
	}
	for _, t := range sortedTypes(dump.Resources) {
		rt := ResourceType{Type: t}
		for _, name := range slices.Sorted(maps.Keys(dump.Resources[t])) {
			var b bytes.Buffer
			if err := json.Indent(&b, dump.Resources[t][name], "", "  "); err != nil {
				b.Reset()
				b.Write(dump.Resources[t][name])
			}
			rt.Resources = append(rt.Resources, Resource{Name: name, JSON: b.String()})
		}
		p.Resources = append(p.Resources, rt)
	}
	return p, http.StatusOK
}

// configDump asks the config-dump handler for the proxy's config.
func (c *Console) configDump(ctx context.Context, id string) (*configDump, error) {
	if c.src.ConfigDump == nil {
		return nil, fmt.Errorf("this console has no config dump")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/debug/config_dump?proxy="+url.QueryEscape(id), nil)
	if err != nil {
		return nil, fmt.Errorf("config dump of %s: %w", id, err)
	}
	rec := &recorder{header: http.Header{}, code: http.StatusOK}
	c.src.ConfigDump.ServeHTTP(rec, req)
	if rec.code != http.StatusOK {
		return nil, fmt.Errorf("config dump of %s: %d: %s", id, rec.code, strings.TrimSpace(rec.body.String()))
	}
	var d configDump
	if err := json.Unmarshal(rec.body.Bytes(), &d); err != nil {
		return nil, fmt.Errorf("config dump of %s: %w", id, err)
	}
	return &d, nil
}

// recorder is the http.ResponseWriter the console hands the config-dump
// handler.
type recorder struct {
	header http.Header
	code   int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}
