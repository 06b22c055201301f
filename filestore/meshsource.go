package filestore

import (
	"bytes"
	"fmt"
	"path"
	"path/filepath"

	"github.com/vmesh/vmesh/store"
	"gopkg.in/yaml.v3"
)

// meshStartupFields are MeshConfig fields a config source's mesh.yaml
// cannot change: the CA, the policies' root and the config sources are set when the control
// plane starts (--mesh-config, --trust-domain, --root-namespace).
var meshStartupFields = map[string]bool{"trustDomain": true, "rootNamespace": true, "configSources": true}

// IsMeshConfigFile reports whether the file at rel, a path relative to the
// repository or directory the source reads, is the source's mesh config:
// MeshConfigFile at the source's root (root is the git path inside the
// repository, "" for a directory).
func IsMeshConfigFile(rel, root string) bool {
	return path.Clean(filepath.ToSlash(rel)) == path.Join(filepath.ToSlash(root), MeshConfigFile)
}

// DecodeSourceFile decodes one file of a config source: the mesh config
// when IsMeshConfigFile(rel, root) and its first document is not a
// Kubernetes-style resource (apiVersion and kind: a tree that already
// named a file of resources mesh.yaml keeps working), Istio config
// documents otherwise (DecodeFile).
func DecodeSourceFile(rel, root string, data []byte, lim Limits) Decoded {
	if !IsMeshConfigFile(rel, root) || holdsResources(data) {
		return DecodeFile(rel, data, lim)
	}
	lim = lim.withDefaults()
	if int64(len(data)) > lim.MaxFileBytes {
		return Decoded{Errors: []store.ConfigError{{File: rel, Message: tooLarge(int64(len(data)), lim.MaxFileBytes).Error()}}}
	}
	mc, errs := DecodeMeshConfig(rel, data)
	if len(errs) > 0 {
		return Decoded{Errors: errs}
	}
	var warns []store.ConfigError
	for _, w := range MeshConfigWarnings(rel, data) {
		if !meshStartupFields[w.Field] {
			warns = append(warns, w)
		}
	}
	var doc yaml.Node
	_ = yaml.Unmarshal(data, &doc) // decoded above
	line := 1
	if len(doc.Content) == 1 {
		root := doc.Content[0]
		line = root.Line
		for i := 0; i+1 < len(root.Content); i += 2 {
			if k := root.Content[i]; meshStartupFields[k.Value] {
				warns = append(warns, store.ConfigError{File: rel, Line: k.Line, Field: k.Value, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
					Message: fmt.Sprintf("MeshConfig %s in the config source's %s is not applied: it is set when the control plane starts (%s)", k.Value, MeshConfigFile, flagOf(k.Value))})
			}
		}
	}
	o := &store.Object{Key: store.MeshConfigKey, APIVersion: "meshconfig", Spec: mc, Origin: store.Origin{File: rel, Line: line}}
	return Decoded{Objects: []*store.Object{o}, Warnings: warns}
}

func flagOf(field string) string {
	switch field {
	case "trustDomain":
		return "--mesh-config, --trust-domain"
	case "rootNamespace":
		return "--mesh-config, --root-namespace"
	}
	return "--mesh-config"
}

// holdsResources reports whether the first YAML document of data is a
// mapping with apiVersion and kind (a MeshConfig has neither field).
func holdsResources(data []byte) bool {
	var doc yaml.Node
	if yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc) != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return false
	}
	var api, kind bool
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		switch m.Content[i].Value {
		case "apiVersion":
			api = true
		case "kind":
			kind = true
		}
	}
	return api && kind
}
