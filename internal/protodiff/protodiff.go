// Package protodiff renders the fields that differ between two messages of
// one type, one line each, for people: vmesh diff's field diffs of xDS
// resources and the console's of changed config objects.
package protodiff

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Fields renders the fields that differ, one per line, as
// "path: before -> after" with paths like virtual_hosts[0].routes[1].name
// ("(none)" for a field only one side has), sorted by path.
func Fields(a, b proto.Message) string {
	return Lines(a, b, 0)
}

// Lines is Fields cut to its first max lines (0: all), with a last line
// counting the rest.
func Lines(a, b proto.Message, max int) string {
	fa, fb := flatten(a), flatten(b)
	paths := make([]string, 0, len(fa)+len(fb))
	for p := range fa {
		paths = append(paths, p)
	}
	for p := range fb {
		if _, ok := fa[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var sb strings.Builder
	n := 0
	for _, p := range paths {
		x, inA := fa[p]
		y, inB := fb[p]
		if inA && inB && x == y {
			continue
		}
		n++
		if max > 0 && n > max {
			continue
		}
		switch {
		case !inA:
			fmt.Fprintf(&sb, "%s: (none) -> %s\n", p, y)
		case !inB:
			fmt.Fprintf(&sb, "%s: %s -> (none)\n", p, x)
		default:
			fmt.Fprintf(&sb, "%s: %s -> %s\n", p, x, y)
		}
	}
	if max > 0 && n > max {
		fmt.Fprintf(&sb, "… and %d more field(s)\n", n-max)
	}
	return sb.String()
}

// flatten maps every leaf field of a message to its JSON value.
func flatten(m proto.Message) map[string]string {
	out := map[string]string{}
	if m == nil {
		return out
	}
	data, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		out[""] = err.Error()
		return out
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		out[""] = err.Error()
		return out
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, c := range t {
				if path == "" {
					walk(k, c)
				} else {
					walk(path+"."+k, c)
				}
			}
		case []any:
			for i, c := range t {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		default:
			b, _ := json.Marshal(t)
			out[path] = string(b)
		}
	}
	walk("", v)
	return out
}
