package xds

import (
	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	grpcgen "github.com/vmesh/vmesh/xds/grpc"
	"github.com/vmesh/vmesh/xds/nds"
)

// NameTableType is the type URL of the name table (Istio's NDS): the hosts
// a proxy can see and the IPs that answer for them, which a VM's agent
// serves from its DNS proxy. The agent's own stream asks for it (a
// wildcard subscription, as Istio's agent does); the response carries one
// resource, NameTableName.
const NameTableType = nds.TypeURL

// NameTableName names the one name table resource of a proxy.
const NameTableName = "nametable"

// nameTableResources generates the name table resource for a View with
// the kind's generator; an empty map when the kind has none (every type of
// a generation has a map).
func nameTableResources(v *model.View, gens generators) (*resourceMap, error) {
	if gens.nameTable == nil {
		return cowmap.New[string, *resource](), nil
	}
	t, err := gens.nameTable(v)
	if err != nil {
		return nil, err
	}
	r, err := newResource(NameTableName, t.Message())
	if err != nil {
		return nil, err
	}
	e := cowmap.New[string, *resource]().Edit()
	e.Set(NameTableName, r)
	return e.Map(), nil
}

// addNameTable adds the name table to a generation being built.
func (g *generation) addNameTable(v *model.View, gens generators) error {
	m, err := nameTableResources(v, gens)
	if err != nil {
		return err
	}
	g.types[NameTableType] = m
	return nil
}

// updateNameTable brings the name table to n, a generation updated from g
// for a change bound to the dirty hosts, and records in gd whether it
// changed. When none of those hosts' entries differs (the usual case: an
// endpoint, route or policy changed) g's table is shared without
// resolving the View; otherwise it is generated again.
func (g *generation) updateNameTable(n *generation, gd *genDiff, dirty map[string]bool) error {
	w := n.proxy.Workload()
	gens, err := generatorsFor(w)
	if err != nil {
		return err
	}
	if prev := g.types[NameTableType]; prev != nil {
		pv, nv := model.NewView(g.snap, w), model.NewView(n.snap, w)
		same := true
		for h := range dirty {
			a, aok := grpcgen.NameInfoOf(pv.ServiceFor(h))
			b, bok := grpcgen.NameInfoOf(nv.ServiceFor(h))
			if aok != bok || !(nds.Table{h: a}).Equal(nds.Table{h: b}) {
				same = false
				break
			}
		}
		if same {
			n.types[NameTableType] = prev
			gd.changed[NameTableType] = map[string]bool{}
			return nil
		}
	}
	m, err := nameTableResources(model.NewView(n.snap, w), gens)
	if err != nil {
		return err
	}
	ch := map[string]bool{}
	var old *resource
	if g.types[NameTableType] != nil {
		old, _ = g.types[NameTableType].Get(NameTableName)
	}
	if nr, ok := m.Get(NameTableName); ok != (old != nil) || (ok && old.hash != nr.hash) {
		ch[NameTableName] = true
		n.types[NameTableType] = m
	} else {
		n.types[NameTableType] = g.types[NameTableType]
	}
	gd.changed[NameTableType] = ch
	return nil
}
