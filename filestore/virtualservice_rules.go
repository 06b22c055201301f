package filestore

import (
	"fmt"
	"strings"

	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// A VirtualService's rules are tried in order and the first that matches
// wins, so a rule (or one of its matches) can be one no request reaches.
// unreachableRules finds them by Istio's rules (analyzeUnreachableHTTPRules,
// analyzeUnreachableTCPRules and analyzeUnreachableTLSRules, with
// genMatchHTTPRoutes and coveredValidation for HTTP prefixes), as IST0130
// (a rule no request reaches: a warning) and IST0131 (a match that repeats,
// or falls within, an earlier one: an info):
//
//   - only the last rule may have no match: a later rule without one is
//     unreachable, and so is each match of a later rule with some;
//   - a match equal to an earlier one (its name aside) never matches, and a
//     rule all of whose matches are such is unreachable;
//   - an HTTP match with a uri prefix is covered by an earlier one whose
//     prefix starts it, on the same port, when the method, authority,
//     headers, query parameters and withoutHeaders of the earlier one
//     start those of the later one (exact and prefix values; a regex
//     counts as no value), with the same names for the last three. The
//     other match fields (sourceLabels, gateways, scheme...) are not
//     compared, as in Istio.
func unreachableRules(w *warner, vs *networking.VirtualService) {
	http := make([]ruleMatches, len(vs.GetHttp()))
	for i, r := range vs.GetHttp() {
		http[i] = ruleMatches{present: r != nil, name: r.GetName()}
		for _, m := range r.GetMatch() {
			http[i].keys = append(http[i].keys, matchKey(withoutName(m)))
		}
	}
	kept := orderedRuleWarnings(w, "http", http)
	for i, m := range kept {
		kept[i].prefix = newPrefixMatch(vs.GetHttp()[m.rule].GetMatch()[m.match])
	}
	prefixCoverWarnings(w, kept)

	tcp := make([]ruleMatches, len(vs.GetTcp()))
	for i, r := range vs.GetTcp() {
		tcp[i] = ruleMatches{present: r != nil}
		for _, m := range r.GetMatch() {
			tcp[i].keys = append(tcp[i].keys, matchKey(m))
		}
	}
	orderedRuleWarnings(w, "tcp", tcp)

	tls := make([]ruleMatches, len(vs.GetTls()))
	for i, r := range vs.GetTls() {
		tls[i] = ruleMatches{present: r != nil}
		for _, m := range r.GetMatch() {
			tls[i].keys = append(tls[i].keys, matchKey(m))
		}
	}
	orderedRuleWarnings(w, "tls", tls)
}

// ruleMatches is one rule as the analysis sees it: whether it is there (a
// null rule is skipped), its name, and a key for each match that is equal
// for equal matches.
type ruleMatches struct {
	present bool
	name    string
	keys    []string
}

// matchRef names one match that no earlier one repeats: the rule, the
// match in it, and (for HTTP) what prefixCoverWarnings compares.
type matchRef struct {
	rule, match int
	prefix      *prefixMatch
}

// orderedRuleWarnings warns about the rules of one kind (field "http",
// "tcp" or "tls") that come after a rule without a match, and about
// matches equal to an earlier one. It returns the other matches, in order,
// for the HTTP prefix analysis.
func orderedRuleWarnings(w *warner, field string, rules []ruleMatches) []matchRef {
	first := map[string]int{} // match key -> the first rule with it
	catchAll := -1            // the first rule without a match
	var kept []matchRef
	for i, r := range rules {
		if !r.present {
			continue
		}
		path := at(field, i)
		if len(r.keys) == 0 {
			if catchAll >= 0 {
				w.add(path, store.CodeUnreachableRule, "%s is never used: %s before it has no match, so it takes every request, and only the last rule may have no match", ruleLabel(path, r.name), ruleLabel(at(field, catchAll), rules[catchAll].name))
			}
			catchAll = i
			continue
		}
		repeated := 0
		for j, key := range r.keys {
			mp := at(path+".match", j)
			if catchAll >= 0 {
				w.add(mp, store.CodeUnreachableRule, "%s of %s is never used: %s before it has no match, so it takes every request", mp, ruleLabel(path, r.name), ruleLabel(at(field, catchAll), rules[catchAll].name))
				continue
			}
			if earlier, ok := first[key]; ok {
				w.info(mp, store.CodeIneffectiveMatch, "%s never matches: an earlier match of %s is the same, and the first that matches wins", mp, ruleLabel(at(field, earlier), rules[earlier].name))
				repeated++
				continue
			}
			first[key] = i
			kept = append(kept, matchRef{rule: i, match: j})
		}
		if repeated == len(r.keys) {
			w.add(path, store.CodeUnreachableRule, "%s is never used: each of its matches is a match of an earlier rule", ruleLabel(path, r.name))
		}
	}
	return kept
}

// ruleLabel is a rule's field path, with its name when it has one.
func ruleLabel(path, name string) string {
	if name == "" {
		return path
	}
	return fmt.Sprintf("%s (%s)", path, quote(name))
}

// matchKey serializes a match so that equal matches have equal keys.
func matchKey(m proto.Message) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// withoutName is an HTTP match without its name, which routes nothing.
func withoutName(m *networking.HTTPMatchRequest) *networking.HTTPMatchRequest {
	if m.GetName() == "" {
		return m
	}
	c := proto.Clone(m).(*networking.HTTPMatchRequest)
	c.Name = ""
	return c
}

// prefixMatch is what Istio compares of an HTTP match with a uri prefix.
// Method, authority and the maps hold "exact:V", "prefix:V" or "" (a
// regex, or none); the method is "exact:GET" when the match has none.
type prefixMatch struct {
	prefix                  string
	port                    uint32
	method, authority       string
	headers, query, without map[string]string
}

// newPrefixMatch returns the comparable part of a match with a non-empty
// uri prefix, or nil.
func newPrefixMatch(m *networking.HTTPMatchRequest) *prefixMatch {
	prefix := m.GetUri().GetPrefix()
	if prefix == "" {
		return nil
	}
	method := exactOrPrefix(m.GetMethod())
	if method == "" {
		method = "exact:GET"
	}
	values := func(ms map[string]*networking.StringMatch) map[string]string {
		out := make(map[string]string, len(ms))
		for k, v := range ms {
			out[k] = exactOrPrefix(v)
		}
		return out
	}
	return &prefixMatch{prefix: prefix, port: m.GetPort(), method: method, authority: exactOrPrefix(m.GetAuthority()),
		headers: values(m.GetHeaders()), query: values(m.GetQueryParams()), without: values(m.GetWithoutHeaders())}
}

// exactOrPrefix writes an exact or prefix string match; "" for a regex or
// none.
func exactOrPrefix(sm *networking.StringMatch) string {
	switch {
	case sm.GetExact() != "":
		return "exact:" + sm.GetExact()
	case sm.GetPrefix() != "":
		return "prefix:" + sm.GetPrefix()
	}
	return ""
}

// covers is Istio's coveredValidation: whether the earlier match a takes
// the requests of the later match b, by its rule (a's value starts b's).
func (a *prefixMatch) covers(b *prefixMatch) bool {
	if !strings.HasPrefix(b.prefix, a.prefix) || a.port != b.port ||
		!strings.HasPrefix(a.method, b.method) || !strings.HasPrefix(a.authority, b.authority) {
		return false
	}
	for _, pair := range [][2]map[string]string{{a.headers, b.headers}, {a.query, b.query}, {a.without, b.without}} {
		if len(pair[0]) != len(pair[1]) {
			return false
		}
		for k, av := range pair[0] {
			bv, ok := pair[1][k]
			if !ok || !strings.HasPrefix(av, bv) {
				return false
			}
		}
	}
	return true
}

// Bounds on the prefix analysis, which compares every pair of matches: a
// VirtualService with thousands of prefix matches is compared in part, and
// gives at most maxCoverWarnings of them (a file reports its first
// warnings only, in any case).
const (
	maxPrefixComparisons = 1 << 20
	maxCoverWarnings     = 1000
)

// prefixCoverWarnings gives IST0131 for each HTTP match with a uri prefix
// that an earlier one covers (one for each earlier match that does; two
// with the same prefix were compared as duplicates already).
func prefixCoverWarnings(w *warner, refs []matchRef) {
	var ps []matchRef
	for _, r := range refs {
		if r.prefix != nil {
			ps = append(ps, r)
		}
	}
	comparisons, warned := 0, 0
	for i, a := range ps {
		for _, b := range ps[i+1:] {
			if comparisons++; comparisons > maxPrefixComparisons || warned >= maxCoverWarnings {
				return
			}
			if a.prefix.prefix == b.prefix.prefix || !a.prefix.covers(b.prefix) {
				continue
			}
			warned++
			bp := at(at("http", b.rule)+".match", b.match)
			w.info(bp, store.CodeIneffectiveMatch, "%s (uri prefix %s) is not used: the earlier %s (uri prefix %s) overlaps it and is tried first",
				bp, quote(b.prefix.prefix), at(at("http", a.rule)+".match", a.match), quote(a.prefix.prefix))
		}
	}
}
