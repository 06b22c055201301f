package xds

import (
	"cmp"
	"slices"

	"github.com/vmesh/vmesh/xds/gen"
	"google.golang.org/protobuf/proto"
)

// What a proxy holds: the resources its streams were last given, by type
// and name, for /debug/config_dump and `vmesh proxy-config`. The cache keeps
// no copy of them: a stream's subscription knows each name's version, and
// the body of that version is found in the generation last sent on the
// stream, the group's current one, or the staged versions of a proxyless
// client's routes.

// HeldStream is what one of a proxy's streams holds.
type HeldStream struct {
	// Protocol is "sotw" or "delta".
	Protocol string `json:"protocol"`
	// Group is the stream's group key.
	Group string `json:"group"`
	// Types holds, per short type name (LDS, RDS, CDS, EDS), the
	// resources by name.
	Types map[string][]HeldResource `json:"types"`
}

// HeldResource is one resource a stream holds.
type HeldResource struct {
	Name string `json:"name"`
	// Version is the resource's version (a hash of its serialised form);
	// "" for a name a delta client unsubscribed while still wildcard.
	Version string `json:"version"`
	// Body is the resource, nil when no generation vmesh still keeps has
	// that version (the proxy holds a version older than the last one it
	// was sent, after rejecting that one).
	Body proto.Message `json:"-"`
}

// held returns what each open stream of the proxy with the given id holds,
// sorted by protocol and group; nil when no stream has that id.
func (c *cache) held(id string) []HeldStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []HeldStream
	for ref, m := range c.members {
		if m.proxy.ID != id {
			continue
		}
		hs := HeldStream{Protocol: "sotw", Group: m.key, Types: map[string][]HeldResource{}}
		if ref.delta != nil {
			hs.Protocol = "delta"
		}
		for _, t := range gen.TypeURLs() {
			sub := m.subs[t]
			if sub == nil {
				continue
			}
			var sent *gen.Generation
			if st := c.sent[streamKey{sotw: ref.sotw, delta: ref.delta, typeURL: t}]; st != nil {
				sent = st.gen
			}
			var rs []HeldResource
			for name, version := range sub.heldSnapshot() {
				rs = append(rs, HeldResource{Name: name, Version: version, Body: c.bodyLocked(ref, m.key, sent, t, name, version)})
			}
			slices.SortFunc(rs, func(a, b HeldResource) int { return cmp.Compare(a.Name, b.Name) })
			hs.Types[shortType(t)] = rs
		}
		out = append(out, hs)
	}
	slices.SortFunc(out, func(a, b HeldStream) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Group, b.Group))
	})
	return out
}

// bodyLocked finds the body of version of the named resource: in the
// generation last sent on the stream, the group's current generation, or
// the staged route versions of the stream. Callers hold c.mu.
func (c *cache) bodyLocked(ref streamRef, group string, sent *gen.Generation, typeURL, name, version string) proto.Message {
	if version == "" {
		return nil
	}
	for _, g := range []*gen.Generation{sent, c.gens[group]} {
		if g == nil {
			continue
		}
		if r := lookup(g, typeURL, name); r != nil && r.Hash == version {
			m, err := r.Message()
			if err != nil {
				c.logger.Error("held resource", "group", group, "type", shortType(typeURL), "error", err)
			}
			return m
		}
	}
	if ref.sotw != nil {
		if st := c.staged[ref.sotw]; st != nil {
			for _, r := range st.routes[name] {
				if r != nil && r.Hash == version {
					return r.Msg
				}
			}
		}
	}
	return nil
}
