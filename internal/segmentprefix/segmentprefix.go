// Package segmentprefix is the form a Gateway API PathPrefix match takes in
// the VirtualServices vmesh's converter (gatewayapi) makes: the regular
// expression QuoteMeta(p)+"(/.*)?", which matches whole path segments (p and
// p/..., not px) and which grpc-go can apply. Istio's converter writes the
// prefix p and its Envoy routes use path_separated_prefix; vmesh's Envoy
// routes (xds/sidecar) turn the expression back into that, and the
// converter's route precedence ranks it as that prefix. Both sides read the
// form here, so writer and readers cannot drift apart.
package segmentprefix

import (
	"regexp"
	"strings"
)

// suffix ends every segment-prefix expression.
const suffix = "(/.*)?"

// Regex is the expression for path prefix p, which must start with "/" and
// not end with it ("/" itself is every path: no expression is needed).
func Regex(p string) string {
	return regexp.QuoteMeta(p) + suffix
}

// Parse returns the path prefix p of an expression Regex wrote; ok is false
// for any other expression.
func Parse(re string) (p string, ok bool) {
	body, ok := strings.CutSuffix(re, suffix)
	if !ok || body == "" {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		if body[i] == '\\' && i+1 < len(body) {
			i++
		}
		b.WriteByte(body[i])
	}
	p = b.String()
	if regexp.QuoteMeta(p) != body || !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.ContainsAny(p, "?#") {
		return "", false
	}
	return p, true
}
