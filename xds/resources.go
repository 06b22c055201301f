package xds

import (
	"strings"

	"github.com/vmesh/vmesh/xds/gen"
)

// shortType names a type URL for logs, metrics and /debug/syncz.
func shortType(typeURL string) string { return gen.ShortType(typeURL) }

// maxMarkers bounds the marker clusters one generation serves: a client
// asks only for the few vmesh's staged routes name.
const maxMarkers = 256

// lookup returns g's resource of a type by name: g's own, a marker
// cluster the server makes on demand (staging.go), or one g's kind makes
// on demand (gen.Part); nil when there is none.
func lookup(g *gen.Generation, typeURL, name string) *gen.Resource {
	if r := g.Get(typeURL, name); r != nil {
		return r
	}
	if strings.HasPrefix(name, markerPrefix) {
		// A client naming more markers than vmesh ever sent gets nil.
		return g.OnDemand(typeURL, name, maxMarkers, func() *gen.Resource { return markerResource(typeURL, name) })
	}
	if g.Part != nil {
		return g.Part.Lookup(g, typeURL, name)
	}
	return nil
}

// served reports whether typeURL is a type vmesh serves (gen.TypeURLs).
func served(typeURL string) bool {
	for _, t := range gen.TypeURLs() {
		if t == typeURL {
			return true
		}
	}
	return false
}
