package filestore

import (
	"encoding/json"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"
)

// debugObject is one object as /debug/config shows it.
type debugObject struct {
	Kind        Kind              `json:"kind"`
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	APIVersion  string            `json:"apiVersion"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Healthy     *bool             `json:"healthy,omitempty"`
	Origin      Origin            `json:"origin"`
	Spec        json.RawMessage   `json:"spec"`
}

// DebugConfig is the JSON document served at /debug/config.
type DebugConfig struct {
	Revision  int64          `json:"revision"`
	Commit    string         `json:"commit,omitempty"`
	Sources   []SourceStatus `json:"sources"`
	Conflicts []Conflict     `json:"conflicts,omitempty"`
	Objects   []debugObject  `json:"objects"`
}

// DebugHandler serves /debug/config: every object with its origin, and every
// source's revision and errors. `?kind=ServiceEntry` filters by kind.
func DebugHandler(store *Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		snap := store.Snapshot()
		out := DebugConfig{Revision: snap.Revision, Commit: snap.Commit(), Sources: snap.Sources, Conflicts: snap.Conflicts, Objects: []debugObject{}}
		kinds := Kinds
		if k := r.URL.Query().Get("kind"); k != "" {
			kinds = []Kind{Kind(k)}
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
