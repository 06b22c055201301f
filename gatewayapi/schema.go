package gatewayapi

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
)

// schemasJSON is written by internal/schemagen (go generate) from the CRDs
// of the sigs.k8s.io/gateway-api module go.mod names.
//
//go:embed schemas.json
var schemasJSON []byte

// schema is one node of a CRD's structural OpenAPI v3 schema: the
// keywords the Gateway API CRDs use.
type schema struct {
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Properties           map[string]*schema `json:"properties"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Required             []string           `json:"required"`
	Enum                 []any              `json:"enum"`
	Pattern              string             `json:"pattern"`
	MinLength            *int64             `json:"minLength"`
	MaxLength            *int64             `json:"maxLength"`
	MinItems             *int64             `json:"minItems"`
	MaxItems             *int64             `json:"maxItems"`
	MaxProperties        *int64             `json:"maxProperties"`
	Minimum              *float64           `json:"minimum"`
	Maximum              *float64           `json:"maximum"`
	Default              any                `json:"default"`
	ListType             string             `json:"x-kubernetes-list-type"`
	ListMapKeys          []string           `json:"x-kubernetes-list-map-keys"`
	Validations          []celRule          `json:"x-kubernetes-validations"`
	OneOf                []*schema          `json:"oneOf"`
	AnyOf                []*schema          `json:"anyOf"`
	Not                  *schema            `json:"not"`

	additional *schema
	re         *regexp.Regexp
}

// celRule is one x-kubernetes-validations rule.
type celRule struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	prog    cel.Program
	// transition rules (oldSelf) compare with a stored object: a file
	// has none, so they never apply.
	transition bool
}

type schemaFile struct {
	Module   string `json:"module"`
	Versions []struct {
		Kind    string `json:"kind"`
		Group   string `json:"group"`
		Version string `json:"version"`
		Schema  int    `json:"schema"`
	} `json:"versions"`
	Schemas []*schema `json:"schemas"`
}

// compiled is schemas.json, parsed and its rules compiled, once.
type compiled struct {
	module string
	// spec schemas by kind, then version.
	specs map[string]map[string]*schema
}

var loadSchemas = sync.OnceValues(func() (*compiled, error) {
	var f schemaFile
	dec := json.NewDecoder(bytes.NewReader(schemasJSON))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("gatewayapi: schemas.json: %w", err)
	}
	env, err := celEnv()
	if err != nil {
		return nil, err
	}
	c := &compiled{module: f.Module, specs: map[string]map[string]*schema{}}
	for _, s := range f.Schemas {
		if err := s.prepare(env); err != nil {
			return nil, err
		}
	}
	for _, v := range f.Versions {
		if c.specs[v.Kind] == nil {
			c.specs[v.Kind] = map[string]*schema{}
		}
		c.specs[v.Kind][v.Version] = f.Schemas[v.Schema].Properties["spec"]
	}
	return c, nil
})

// celEnv is the CEL environment of Kubernetes' CRD validation rules, as far
// as the Gateway API's rules use it: the standard library, the strings
// extension, and isIP.
func celEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("self", cel.DynType),
		cel.Variable("oldSelf", cel.DynType),
		ext.Strings(),
		cel.Function("isIP", cel.Overload("isIP_string", []*cel.Type{cel.StringType}, cel.BoolType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				s, ok := v.Value().(string)
				if !ok {
					return types.NewErr("isIP: not a string")
				}
				_, err := netip.ParseAddr(s)
				return types.Bool(err == nil && !strings.Contains(s, "%"))
			}))),
	)
}

func (s *schema) prepare(env *cel.Env) error {
	if s == nil {
		return nil
	}
	if s.Pattern != "" {
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			return fmt.Errorf("gatewayapi: pattern %q: %w", s.Pattern, err)
		}
		s.re = re
	}
	s.Default = normaliseNumbers(s.Default)
	for i, e := range s.Enum {
		s.Enum[i] = normaliseNumbers(e)
	}
	if len(s.AdditionalProperties) > 0 && s.AdditionalProperties[0] == '{' {
		s.additional = &schema{}
		if err := json.Unmarshal(s.AdditionalProperties, s.additional); err != nil {
			return fmt.Errorf("gatewayapi: additionalProperties: %w", err)
		}
	}
	for i := range s.Validations {
		r := &s.Validations[i]
		ast, iss := env.Compile(r.Rule)
		if iss.Err() != nil {
			return fmt.Errorf("gatewayapi: rule %q: %w", r.Rule, iss.Err())
		}
		r.transition = strings.Contains(r.Rule, "oldSelf")
		prog, err := env.Program(ast, cel.CostLimit(10_000_000))
		if err != nil {
			return fmt.Errorf("gatewayapi: rule %q: %w", r.Rule, err)
		}
		r.prog = prog
	}
	for _, p := range s.Properties {
		if err := p.prepare(env); err != nil {
			return err
		}
	}
	for _, sub := range slices.Concat([]*schema{s.Items, s.additional, s.Not}, s.OneOf, s.AnyOf) {
		if err := sub.prepare(env); err != nil {
			return err
		}
	}
	return nil
}

// normaliseNumbers turns JSON numbers into int64 (whole) or float64.
func normaliseNumbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	case map[string]any:
		for k, e := range t {
			t[k] = normaliseNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = normaliseNumbers(e)
		}
	}
	return v
}

// Problem is one way a spec breaks its CRD's rules, at a field path inside
// spec ("rules[0].matches[0].path.value").
type Problem struct {
	Field   string
	Message string
}

// validator walks one value against its schema, as the API server's
// schema validation does, then (when nothing blocks them) the CEL rules.
type validator struct {
	problems []Problem
	// unknown are the fields the schema does not know: the API server's
	// strict field validation refuses a document with them before it
	// validates anything else.
	unknown []Problem
	// blocking: a problem the API server counts as blocking (a missing
	// required field, an enum value, a length or count above the maximum,
	// a wrong type) was found; it evaluates no CEL rule then
	// (registry/customresource/strategy.go, hasBlockingErr).
	blocking bool
	// failed records the CEL rules that failed, when set (the tests'
	// coverage of the CRDs' rules).
	failed map[string]bool
}

func (v *validator) addf(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Field: path, Message: fmt.Sprintf(format, args...)})
}

// blockf adds a blocking problem.
func (v *validator) blockf(path, format string, args ...any) {
	v.blocking = true
	v.addf(path, format, args...)
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// applyDefaults fills in the schema's defaults, as the API server does on
// decoding: a property absent from an object present takes its default.
func applyDefaults(s *schema, v any) any {
	if s == nil {
		return v
	}
	switch t := v.(type) {
	case map[string]any:
		for name, ps := range s.Properties {
			if _, ok := t[name]; !ok && ps.Default != nil {
				t[name] = deepCopy(ps.Default)
			}
		}
		for name, e := range t {
			if ps := s.Properties[name]; ps != nil {
				t[name] = applyDefaults(ps, e)
			} else if s.additional != nil {
				t[name] = applyDefaults(s.additional, e)
			}
		}
	case []any:
		for i, e := range t {
			t[i] = applyDefaults(s.Items, e)
		}
	}
	return v
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// check validates v against s: types, unknown fields, required fields,
// enums, patterns, lengths, bounds, formats and list uniqueness (not the
// CEL rules: celRules).
func (v *validator) check(s *schema, val any, path string) {
	if s == nil {
		return
	}
	switch s.Type {
	case "object":
		m, ok := val.(map[string]any)
		if !ok {
			v.blockf(path, "must be an object, not %s", describe(val))
			return
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				v.blockf(join(path, r), "%s is required", r)
			}
		}
		if s.MaxProperties != nil && int64(len(m)) > *s.MaxProperties {
			v.blockf(path, "must have at most %d entries, not %d", *s.MaxProperties, len(m))
		}
		for _, k := range sortedKeys(m) {
			fpath := join(path, k)
			switch {
			case s.Properties[k] != nil:
				v.check(s.Properties[k], m[k], fpath)
			case s.additional != nil:
				v.check(s.additional, m[k], fpath)
			case s.Properties != nil:
				v.unknown = append(v.unknown, Problem{Field: fpath, Message: fmt.Sprintf("unknown field %q%s", k, didYouMean(k, sortedKeys(s.Properties)))})
			}
		}
	case "array":
		l, ok := val.([]any)
		if !ok {
			v.blockf(path, "must be a list, not %s", describe(val))
			return
		}
		if s.MinItems != nil && int64(len(l)) < *s.MinItems {
			v.addf(path, "must have at least %d items, not %d", *s.MinItems, len(l))
		}
		if s.MaxItems != nil && int64(len(l)) > *s.MaxItems {
			v.blockf(path, "must have at most %d items, not %d", *s.MaxItems, len(l))
		}
		for i, e := range l {
			v.check(s.Items, e, fmt.Sprintf("%s[%d]", path, i))
		}
		v.unique(s, l, path)
	case "string":
		str, ok := val.(string)
		if !ok {
			v.blockf(path, "must be a string, not %s", describe(val))
			return
		}
		n := int64(len([]rune(str)))
		if s.MinLength != nil && n < *s.MinLength {
			v.addf(path, "must be at least %d characters long", *s.MinLength)
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			v.blockf(path, "must be at most %d characters long, not %d", *s.MaxLength, n)
		}
		if s.re != nil && !s.re.MatchString(str) {
			v.addf(path, "%q does not match %s", clip(str), s.Pattern)
		}
		if msg := checkFormat(s.Format, str); msg != "" {
			v.addf(path, "%s", msg)
		}
	case "integer", "number":
		var f float64
		switch t := val.(type) {
		case int64:
			f = float64(t)
		case float64:
			if s.Type == "integer" {
				v.blockf(path, "must be an integer, not %v", t)
				return
			}
			f = t
		default:
			v.blockf(path, "must be a number, not %s", describe(val))
			return
		}
		if s.Minimum != nil && f < *s.Minimum {
			v.addf(path, "must be at least %v", *s.Minimum)
		}
		if s.Maximum != nil && f > *s.Maximum {
			v.addf(path, "must be at most %v", *s.Maximum)
		}
		if s.Format == "int32" && (f < math.MinInt32 || f > math.MaxInt32) {
			v.addf(path, "must fit in 32 bits")
		}
	case "boolean":
		if _, ok := val.(bool); !ok {
			v.blockf(path, "must be true or false, not %s", describe(val))
			return
		}
	}
	if len(s.Enum) > 0 && !slices.Contains(s.Enum, val) {
		want := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			want[i] = fmt.Sprint(e)
		}
		v.blockf(path, "unknown value %s (want one of %s)", quoteValue(val), strings.Join(want, ", "))
	}
	if len(s.OneOf) > 0 {
		n := 0
		var closest []Problem
		for _, alt := range s.OneOf {
			ps := altProblems(alt, val)
			if len(ps) == 0 {
				n++
			} else if closest == nil || len(ps) < len(closest) {
				closest = ps
			}
		}
		if n != 1 {
			v.addf(path, "%s", oneOfMessage(val))
		}
		if n == 0 {
			// as the API server, the problems of the closest form too
			// (the first of those with the fewest)
			for _, p := range closest {
				v.addf(joinPath(path, p.Field), "%s", p.Message)
			}
		}
	}
	if s.Not != nil && matches(s.Not, val) {
		v.addf(path, "%s is not allowed here", quoteValue(val))
	}
	if len(s.AnyOf) > 0 && !slices.ContainsFunc(s.AnyOf, func(alt *schema) bool { return matches(alt, val) }) {
		v.addf(path, "%s matches none of the allowed forms", quoteValue(val))
	}
}

// celRules evaluates the CEL rules of s and of its properties and items
// over val, everywhere: the API server evaluates every rule once nothing
// blocks them (a pattern or a bound that fails does not), so a rule fails
// next to the problems of the fields under it.
func (v *validator) celRules(s *schema, val any, path string) {
	if s == nil {
		return
	}
	switch t := val.(type) {
	case map[string]any:
		for _, k := range sortedKeys(t) {
			switch {
			case s.Properties[k] != nil:
				v.celRules(s.Properties[k], t[k], join(path, k))
			case s.additional != nil:
				v.celRules(s.additional, t[k], join(path, k))
			}
		}
	case []any:
		for i, e := range t {
			v.celRules(s.Items, e, fmt.Sprintf("%s[%d]", path, i))
		}
	}
	if len(s.Validations) > 0 {
		v.rules(s, val, path)
	}
}

// matches reports whether val satisfies alt, a oneOf or anyOf variant
// (whose missing type is val's own).
func matches(alt *schema, val any) bool {
	return len(altProblems(alt, val)) == 0
}

// joinPath appends a path relative to a value (a field, an index or
// nothing) to the value's path.
func joinPath(path, rel string) string {
	if rel == "" || strings.HasPrefix(rel, "[") {
		return path + rel
	}
	return join(path, rel)
}

// altProblems returns the problems of val against alt, a oneOf or anyOf
// variant (whose missing type is val's own), at paths relative to val;
// none when val matches it.
func altProblems(alt *schema, val any) []Problem {
	if alt.Not != nil && matches(alt.Not, val) {
		return []Problem{{Message: fmt.Sprintf("%s is not allowed here", quoteValue(val))}}
	}
	probe := &validator{}
	c := *alt
	c.Not = nil
	if c.Type == "" {
		if _, ok := val.(map[string]any); ok && c.Properties != nil {
			c.Type = "object"
			// a variant constrains the properties it names, nothing else
			m := val.(map[string]any)
			for k, ps := range c.Properties {
				if e, ok := m[k]; ok {
					probe.check(withType(ps, e), e, k)
				}
			}
			return append(probe.problems, probe.unknown...)
		}
	}
	probe.check(withType(&c, val), val, "")
	return append(probe.problems, probe.unknown...)
}

// withType gives a variant without a type the type of val.
func withType(s *schema, val any) *schema {
	if s.Type != "" {
		return s
	}
	c := *s
	switch val.(type) {
	case string:
		c.Type = "string"
	case map[string]any:
		c.Type = "object"
	case []any:
		c.Type = "array"
	case bool:
		c.Type = "boolean"
	case int64, float64:
		c.Type = "number"
	}
	return &c
}

func oneOfMessage(val any) string {
	if m, ok := val.(map[string]any); ok && m["type"] == "IPAddress" {
		return fmt.Sprintf("value %s is not an IP address", quoteValue(m["value"]))
	}
	return "must match exactly one of the allowed forms"
}

func checkFormat(format, s string) string {
	switch format {
	case "ipv4":
		if a, err := netip.ParseAddr(s); err != nil || !a.Is4() {
			return fmt.Sprintf("%q is not an IPv4 address", clip(s))
		}
	case "ipv6":
		if a, err := netip.ParseAddr(s); err != nil || !a.Is6() {
			return fmt.Sprintf("%q is not an IPv6 address", clip(s))
		}
	}
	return ""
}

// unique checks x-kubernetes-list-type set and map.
func (v *validator) unique(s *schema, l []any, path string) {
	switch s.ListType {
	case "set":
		for i := range l {
			for j := range i {
				if equalValues(l[i], l[j]) {
					v.addf(fmt.Sprintf("%s[%d]", path, i), "duplicate value %s (also item %d)", quoteValue(l[i]), j)
					break
				}
			}
		}
	case "map":
		seen := map[string]int{}
		for i, e := range l {
			m, ok := e.(map[string]any)
			if !ok {
				continue
			}
			parts := make([]string, len(s.ListMapKeys))
			for k, key := range s.ListMapKeys {
				parts[k] = key + "=" + fmt.Sprint(m[key])
			}
			id := strings.Join(parts, ",")
			if j, dup := seen[id]; dup {
				v.addf(fmt.Sprintf("%s[%d]", path, i), "duplicate entry %s (also item %d)", id, j)
				continue
			}
			seen[id] = i
		}
	}
}

func equalValues(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// celReserved are the CEL keywords Kubernetes escapes in property names
// (__name__) for the rules to read them.
var celReserved = []string{"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
	"function", "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"}

// celValue renders val for CEL: objects' property names escaped as
// Kubernetes does (maps' keys are data, left as they are).
func celValue(s *schema, val any) any {
	switch t := val.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			var ps *schema
			name := k
			if s != nil && s.Properties != nil {
				ps = s.Properties[k]
				name = escapeProperty(k)
			} else if s != nil {
				ps = s.additional
			}
			out[name] = celValue(ps, e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		var is *schema
		if s != nil {
			is = s.Items
		}
		for i, e := range t {
			out[i] = celValue(is, e)
		}
		return out
	}
	return val
}

func escapeProperty(k string) string {
	if slices.Contains(celReserved, k) {
		return "__" + k + "__"
	}
	k = strings.ReplaceAll(k, "__", "__underscores__")
	k = strings.ReplaceAll(k, ".", "__dot__")
	k = strings.ReplaceAll(k, "-", "__dash__")
	k = strings.ReplaceAll(k, "/", "__slash__")
	return k
}

// rules evaluates the node's CEL rules; a rule that fails, or cannot be
// evaluated, is a problem.
func (v *validator) rules(s *schema, val any, path string) {
	self := celValue(s, val)
	for i := range s.Validations {
		r := &s.Validations[i]
		if r.transition {
			continue
		}
		out, _, err := r.prog.Eval(map[string]any{"self": self})
		if v.failed != nil && (err != nil || out.Value() != true) {
			v.failed[r.Rule] = true
		}
		if err != nil {
			v.addf(path, "rule %s could not be evaluated: %v", clip(r.Rule), err)
			continue
		}
		if ok, isBool := out.Value().(bool); !isBool || !ok {
			msg := r.Message
			if msg == "" {
				msg = "failed rule: " + clip(r.Rule)
			}
			v.addf(path, "%s", msg)
		}
	}
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

func quoteValue(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(clip(s))
	}
	return fmt.Sprint(v)
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// didYouMean suggests the closest known field name.
func didYouMean(k string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := distance(strings.ToLower(k), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
