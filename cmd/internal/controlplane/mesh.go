package controlplane

import (
	"errors"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
)

// meshSettings reads Config.MeshConfig, Istio's MeshConfig YAML (the `mesh`
// key of istiod's ConfigMap), over Istio's defaults. Its trustDomain and
// rootNamespace fill the CA settings left empty; a flag or vmesh.yaml value
// that disagrees with the file is an error, never a silent choice. Without
// a file the mesh is Istio's defaults with the CA settings.
// The warnings are the file's fields vmesh reads but does not apply
// (filestore.MeshConfigWarnings).
func (c *Config) meshSettings() (model.Mesh, *meshv1alpha1.MeshConfig, []store.ConfigError, error) {
	if c.MeshConfig == "" {
		return model.Mesh{RootNamespace: c.CA.RootNamespace, TrustDomain: c.CA.TrustDomain}, nil, nil, nil
	}
	data, err := os.ReadFile(c.MeshConfig)
	if err != nil {
		return model.Mesh{}, nil, nil, fmt.Errorf("mesh config: %w", err)
	}
	mc, errs := filestore.DecodeMeshConfig(c.MeshConfig, data)
	if len(errs) > 0 {
		all := make([]error, len(errs))
		for i, e := range errs {
			all[i] = e
		}
		return model.Mesh{}, nil, nil, fmt.Errorf("mesh config: %w", errors.Join(all...))
	}
	var set map[string]any
	_ = yaml.Unmarshal(data, &set) // decoded above: only which keys the file sets
	for _, f := range []struct {
		key, flag string
		value     *string
		file      string
	}{
		{"trustDomain", "--trust-domain (ca.trustDomain)", &c.CA.TrustDomain, mc.GetTrustDomain()},
		{"rootNamespace", "--root-namespace (ca.rootNamespace)", &c.CA.RootNamespace, mc.GetRootNamespace()},
	} {
		if _, inFile := set[f.key]; !inFile {
			continue
		}
		if *f.value != "" && *f.value != f.file {
			return model.Mesh{}, nil, nil, fmt.Errorf("mesh config %s sets %s %q but %s is %q: set it in one place", c.MeshConfig, f.key, f.file, f.flag, *f.value)
		}
		*f.value = f.file
	}
	m := model.MeshFromConfig(mc)
	m.RootNamespace, m.TrustDomain = c.CA.RootNamespace, c.CA.TrustDomain
	return m, mc, filestore.MeshConfigWarnings(c.MeshConfig, data), nil
}

// proxyDefaults returns what the mesh config's defaultConfig says VMs'
// agents use: the discovery address (only when the mesh config sets one
// other than Istio's default, istiod's Kubernetes name, which no VM can
// dial) and proxyMetadata. The config source's mesh.yaml wins over
// --mesh-config, as for the rest of the mesh settings.
func (cp *ControlPlane) proxyDefaults() (discovery string, metadata map[string]string) {
	mc := cp.meshConfig
	if o := cp.store.Snapshot().Get(store.MeshConfigKey); o != nil {
		if v, ok := o.Spec.(*meshv1alpha1.MeshConfig); ok {
			mc = v
		}
	}
	dc := mc.GetDefaultConfig()
	if a := dc.GetDiscoveryAddress(); a != filestore.DefaultMeshConfig().GetDefaultConfig().GetDiscoveryAddress() {
		discovery = a
	}
	return discovery, dc.GetProxyMetadata()
}

// publishMeshWarnings shows the mesh config's not-applied fields as the
// warnings of a source of their own, mesh-config:FILE: /debug/config, the
// vmesh_config_warnings gauge, the console and vmesh status see them.
func (c *Config) publishMeshWarnings(st *store.Store, warns []store.ConfigError) {
	if c.MeshConfig == "" {
		return
	}
	st.SetStatus(store.Source{Name: "mesh-config:" + c.MeshConfig, Class: store.ClassConfig}, "", warns)
}
