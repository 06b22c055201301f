package model

import (
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/vmesh/vmesh/store"
)

// meshOf returns the mesh settings of fs: those of its MeshConfig (a
// config source's mesh.yaml) when it has one, with base's root namespace
// and trust domain (set when the control plane starts: its CA's), else
// base.
func meshOf(fs *store.Snapshot, base Mesh) Mesh {
	o := fs.Get(store.MeshConfigKey)
	if o == nil {
		return base
	}
	mc, ok := o.Spec.(*meshv1alpha1.MeshConfig)
	if !ok {
		return base
	}
	m := MeshFromConfig(mc)
	m.RootNamespace, m.TrustDomain = base.RootNamespace, base.TrustDomain
	return m
}
