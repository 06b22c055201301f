package filestore

import (
	"fmt"
	"strings"

	"github.com/agnivade/levenshtein"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// didYouMean returns ` (did you mean "x"?)` naming the candidate closest to
// an unknown field name: one that differs only in case (retryon, retryOn),
// else the nearest by edit distance when it is close enough to be a typo
// (at most a third of the name's length, at least 1); "" when none is.
func didYouMean(name string, candidates []string) string {
	best, bestDist := "", 0
	for _, c := range candidates {
		if c == name {
			continue
		}
		if strings.EqualFold(c, name) {
			return fmt.Sprintf(" (did you mean %q?)", c)
		}
		d := levenshtein.ComputeDistance(strings.ToLower(name), strings.ToLower(c))
		if best == "" || d < bestDist || d == bestDist && c < best {
			best, bestDist = c, d
		}
	}
	if best == "" || bestDist > max(1, len(name)/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// fieldNames lists a message's fields as YAML writes them (their JSON
// names), the candidates didYouMean picks from.
func fieldNames(md protoreflect.MessageDescriptor) []string {
	fields := md.Fields()
	names := make([]string, fields.Len())
	for i := range fields.Len() {
		names[i] = fields.Get(i).JSONName()
	}
	return names
}
