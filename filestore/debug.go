package filestore

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/encoding/protojson"
)

// debugObject is one object as /debug/config shows it.
type debugObject struct {
	Kind        store.Kind        `json:"kind"`
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	APIVersion  string            `json:"apiVersion"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Healthy     *bool             `json:"healthy,omitempty"`
	Origin      store.Origin      `json:"origin"`
	Spec        json.RawMessage   `json:"spec"`
}

// DebugConfig is the JSON document served at /debug/config.
type DebugConfig struct {
	Revision  int64                `json:"revision"`
	Commit    string               `json:"commit,omitempty"`
	Sources   []store.SourceStatus `json:"sources"`
	Conflicts []store.Conflict     `json:"conflicts,omitempty"`
	// Warnings are every warning, each with its source: the sources' own
	// (also under sources[].warnings) and the analysis across them.
	Warnings []store.ConfigError `json:"warnings,omitempty"`
	// RouteStatus is the status of every Gateway API HTTPRoute and
	// GRPCRoute by parentRef (Accepted, ResolvedRefs with their reasons),
	// which an API server would hold: there is none to write it to.
	RouteStatus []gatewayapi.RouteStatus `json:"routeStatus,omitempty"`
	Objects     []debugObject            `json:"objects"`
}

// DebugHandler serves /debug/config: every object with its origin, every
// source's revision and errors, and every warning (warnings gives them
// for a snapshot). `?kind=ServiceEntry` filters by kind.
func DebugHandler(st *store.Store, warnings func(*store.Snapshot) []store.ConfigError) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		snap := st.Snapshot()
		out := DebugConfig{Revision: snap.Revision, Commit: snap.Commit(), Sources: snap.Sources, Conflicts: snap.Conflicts, Warnings: warnings(snap), Objects: []debugObject{}}
		if len(snap.List(store.KindHTTPRoute))+len(snap.List(store.KindGRPCRoute)) > 0 {
			out.RouteStatus = gatewayapi.Convert(snap).Status
		}
		kinds := store.Kinds
		if k := r.URL.Query().Get("kind"); k != "" {
			kinds = []store.Kind{store.Kind(k)}
		}
		for _, kind := range kinds {
			for _, o := range snap.List(kind) {
				spec, err := protojson.Marshal(o.Spec)
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				out.Objects = append(out.Objects, debugObject{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, APIVersion: o.APIVersion,
					Labels: o.Labels, Annotations: o.Annotations, Healthy: o.Healthy, Origin: o.Origin, Spec: spec})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	})
}

// DecodeObjects returns the objects of a /debug/config document whose
// source keep accepts (by name and class), decoded as the Store had them:
// vmesh validate and analyze --server check files against a running
// control plane's registry objects.
func (c DebugConfig) DecodeObjects(keep func(source, class string) bool) ([]*store.Object, error) {
	class := make(map[string]string, len(c.Sources))
	for _, st := range c.Sources {
		class[st.Source] = st.Class
	}
	var out []*store.Object
	for _, d := range c.Objects {
		if !keep(d.Origin.Source, class[d.Origin.Source]) {
			continue
		}
		info, ok := lookupKind(d.Kind)
		if !ok {
			return nil, fmt.Errorf("%s/%s/%s: unknown kind", d.Kind, d.Namespace, d.Name)
		}
		spec := info.newSpec()
		if err := protojson.Unmarshal(d.Spec, spec); err != nil {
			return nil, fmt.Errorf("%s/%s/%s: %w", d.Kind, d.Namespace, d.Name, err)
		}
		out = append(out, &store.Object{Key: store.Key{Kind: d.Kind, Namespace: d.Namespace, Name: d.Name}, APIVersion: d.APIVersion,
			Labels: d.Labels, Annotations: d.Annotations, Spec: spec, Healthy: d.Healthy, Origin: d.Origin})
	}
	return out, nil
}
