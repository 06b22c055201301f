package filestore

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// MeshConfigFile is the name of the mesh config in a config directory or at
// the root of a git path: Istio's MeshConfig, the YAML under the `mesh` key
// of istiod's ConfigMap.
const MeshConfigFile = "mesh.yaml"

// DefaultMeshConfig returns Istio's defaults for the MeshConfig fields vmesh
// reads (pkg/config/mesh DefaultMeshConfig in Istio 1.31).
func DefaultMeshConfig() *meshv1alpha1.MeshConfig {
	return &meshv1alpha1.MeshConfig{
		TrustDomain:                    "cluster.local",
		RootNamespace:                  "istio-system",
		EnableAutoMtls:                 wrapperspb.Bool(true),
		OutboundTrafficPolicy:          &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{Mode: meshv1alpha1.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY},
		InboundTrafficPolicy:           &meshv1alpha1.MeshConfig_InboundTrafficPolicy{Mode: meshv1alpha1.MeshConfig_InboundTrafficPolicy_PASSTHROUGH},
		LocalityLbSetting:              &networking.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(true)},
		ConnectTimeout:                 durationpb.New(10 * time.Second),
		ProxyListenPort:                15001,
		ProxyInboundListenPort:         15006,
		DefaultServiceExportTo:         []string{"*"},
		DefaultVirtualServiceExportTo:  []string{"*"},
		DefaultDestinationRuleExportTo: []string{"*"},
		DnsRefreshRate:                 durationpb.New(60 * time.Second),
		EnableTracing:                  true,
		DefaultConfig: &meshv1alpha1.ProxyConfig{
			DiscoveryAddress: "istiod.istio-system.svc:15012",
			ProxyMetadata:    map[string]string{},
		},
	}
}

// DecodeMeshConfig reads a mesh config file over Istio's defaults, as
// istiod applies its ConfigMap: every top-level field set replaces the
// default, except defaultConfig, whose fields are merged into the default
// proxy config (proxyMetadata key by key), and extensionProviders, merged by
// name. Problems name the file, line and field; with any, the result is nil.
func DecodeMeshConfig(file string, data []byte) (*meshv1alpha1.MeshConfig, []store.ConfigError) {
	fail := func(line int, field, format string, args ...any) (*meshv1alpha1.MeshConfig, []store.ConfigError) {
		return nil, []store.ConfigError{{File: file, Line: line, Field: field, Message: fmt.Sprintf(format, args...)}}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err.Error() == "EOF" {
			return DefaultMeshConfig(), nil // an empty file: Istio's defaults
		}
		return nil, []store.ConfigError{yamlError(file, data, err)}
	}
	var second yaml.Node
	if dec.Decode(&second) == nil {
		return fail(second.Line, "", "%s holds one MeshConfig document, found another", MeshConfigFile)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return DefaultMeshConfig(), nil
	}
	if root.Kind != yaml.MappingNode {
		return fail(root.Line, "", "a MeshConfig is a mapping of its fields")
	}
	user := &meshv1alpha1.MeshConfig{}
	if errs := checkMeshFields(file, root, user.ProtoReflect().Descriptor(), ""); len(errs) > 0 {
		return nil, errs
	}
	var v any
	if err := root.Decode(&v); err != nil {
		return fail(root.Line, "", "%v", err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		return fail(root.Line, "", "%v", err)
	}
	if err := protojson.Unmarshal(js, user); err != nil {
		line, field := locateMeshError(root, user.ProtoReflect().Descriptor(), "")
		msg := err.Error()
		if _, rest, ok := strings.Cut(msg, "(line "); ok {
			if _, after, ok := strings.Cut(rest, "): "); ok {
				msg = after // protojson's position is in the JSON vmesh made, not in the file
			}
		}
		return fail(cmp.Or(line, root.Line), field, "%s", msg)
	}
	seen := map[string]int{}
	for i, p := range user.GetExtensionProviders() {
		if j, dup := seen[p.GetName()]; dup && p.GetName() != "" {
			return fail(root.Line, fmt.Sprintf("extensionProviders[%d].name", i), "%q is defined twice (also extensionProviders[%d])", p.GetName(), j)
		}
		seen[p.GetName()] = i
	}
	mc := mergeMeshConfig(DefaultMeshConfig(), user)
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "enableTracing" {
			mc.EnableTracing = user.GetEnableTracing() // false is proto3's zero: merging skips it
		}
	}
	var errs []store.ConfigError
	for _, p := range validateMeshConfig(mc) {
		line := root.Line
		top, _, _ := strings.Cut(p.Field, ".")
		top, _, _ = strings.Cut(top, "[")
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == top {
				line = root.Content[i].Line
			}
		}
		errs = append(errs, store.ConfigError{File: file, Line: line, Field: p.Field, Message: p.Message})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return mc, nil
}

// checkFields reports mapping keys that name no field of the message, at
// their line: protojson would only say "unknown field" without one.
func checkMeshFields(file string, n *yaml.Node, md protoreflect.MessageDescriptor, path string) []store.ConfigError {
	if n.Kind != yaml.MappingNode || md == nil {
		return nil
	}
	switch md.FullName() {
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.Duration", "google.protobuf.Any":
		return nil
	}
	var errs []store.ConfigError
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		fd := md.Fields().ByJSONName(k.Value)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k.Value))
		}
		field := k.Value
		if path != "" {
			field = path + "." + k.Value
		}
		if fd == nil {
			errs = append(errs, store.ConfigError{File: file, Line: k.Line, Field: field, Message: fmt.Sprintf("unknown field %q of %s%s", k.Value, md.Name(), didYouMean(k.Value, fieldNames(md)))})
			continue
		}
		if fd.Kind() != protoreflect.MessageKind || fd.IsMap() && fd.MapValue().Kind() != protoreflect.MessageKind {
			continue
		}
		sub := fd.Message()
		if fd.IsMap() {
			sub = fd.MapValue().Message()
		}
		if fd.IsList() || fd.IsMap() {
			for j, item := range val.Content {
				if fd.IsMap() && j%2 == 0 {
					continue
				}
				errs = append(errs, checkMeshFields(file, item, sub, fmt.Sprintf("%s[%d]", field, j))...)
			}
			continue
		}
		errs = append(errs, checkMeshFields(file, val, sub, field)...)
	}
	return errs
}

// meshConfigApplied are the MeshConfig fields vmesh applies; the others are
// read (and validated where vmesh checks them) but change nothing yet.
var meshConfigApplied = map[string]bool{
	"defaultHttpRetryPolicy": true, "outboundTrafficPolicy": true, "connectTimeout": true, "dnsRefreshRate": true,
	"trustDomain": true, "trustDomainAliases": true, "meshMTLS": true, "rootNamespace": true, "enableAutoMtls": true, "localityLbSetting": true, "extensionProviders": true,
	"defaultServiceExportTo": true, "defaultVirtualServiceExportTo": true, "defaultDestinationRuleExportTo": true,
	"accessLogFile": true, "accessLogEncoding": true, "accessLogFormat": true, "h2UpgradePolicy": true, "tcpKeepalive": true,
	"inboundTrafficPolicy": true, "enableTracing": true, "defaultProviders": true,
	// configSources: the xds:// entries of --mesh-config (filestore/mcpsource);
	// the control plane warns about the rest of each entry.
	"configSources": true,
}

// MeshConfigWarnings lists the top-level fields a mesh config file sets that
// vmesh reads but does not apply (VM1011), each with its line; a file that
// does not decode has none (DecodeMeshConfig reports it).
func MeshConfigWarnings(file string, data []byte) []store.ConfigError {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	root := doc.Content[0]
	var out []store.ConfigError
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value == "defaultConfig" && v.Kind == yaml.MappingNode {
			// Applied in part: what the VMs' agents take through their
			// bundles (vmesh vm bundle).
			for j := 0; j+1 < len(v.Content); j += 2 {
				if sk, sv := v.Content[j], v.Content[j+1]; sk.Value == "tracing" && sv.Kind == yaml.MappingNode {
					// Applied in part: what Istio's connection managers take
					// from it.
					for t := 0; t+1 < len(sv.Content); t += 2 {
						if tk := sv.Content[t]; !proxyTracingApplied[tk.Value] {
							out = append(out, store.ConfigError{File: file, Line: tk.Line, Field: "defaultConfig.tracing." + tk.Value, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
								Message: fmt.Sprintf("MeshConfig defaultConfig.tracing.%s is read but not applied by vmesh (applied: defaultConfig.tracing.%s; name a tracer with extensionProviders and defaultProviders.tracing)", tk.Value, strings.Join(slices.Sorted(maps.Keys(proxyTracingApplied)), ", defaultConfig.tracing."))})
						}
					}
					continue
				}
				if sk := v.Content[j]; !defaultConfigApplied[sk.Value] {
					out = append(out, store.ConfigError{File: file, Line: sk.Line, Field: "defaultConfig." + sk.Value, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
						Message: fmt.Sprintf("MeshConfig defaultConfig.%s is read but not applied by vmesh (applied: defaultConfig.discoveryAddress and defaultConfig.proxyMetadata, through vmesh vm bundle)", sk.Value)})
				}
			}
			continue
		}
		if k.Value == "defaultProviders" && v.Kind == yaml.MappingNode {
			// Applied: tracing (the first provider, as Istio) and
			// accessLogging (each envoyFileAccessLog and envoyOtelAls
			// provider).
			for j := 0; j+1 < len(v.Content); j += 2 {
				if sk := v.Content[j]; sk.Value == "tracing" {
					out = append(out, tracingProviderWarnings(file, root, v.Content[j+1])...)
				} else if sk.Value == "accessLogging" {
					out = append(out, accessLogProviderWarnings(file, root, v.Content[j+1])...)
				} else {
					out = append(out, store.ConfigError{File: file, Line: sk.Line, Field: "defaultProviders." + sk.Value, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
						Message: fmt.Sprintf("MeshConfig defaultProviders.%s is read but not applied by vmesh (applied: defaultProviders.tracing, defaultProviders.accessLogging)", sk.Value)})
				}
			}
			continue
		}
		if k.Value == "accessLogFormat" && v.Kind == yaml.ScalarNode && v.Value != "" && jsonEncoding(root) && !isJSONObject(v.Value) {
			out = append(out, store.ConfigError{File: file, Line: k.Line, Field: k.Value, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
				Message: "MeshConfig accessLogFormat is not a JSON object of field names to format strings, which accessLogEncoding JSON needs: Envoy sidecars log in Istio's default JSON format instead, as Istio's do"})
			continue
		}
		if k.Value == "extensionProviders" {
			out = append(out, tracerFieldWarnings(file, root)...)
			continue
		}
		if meshConfigApplied[k.Value] {
			continue
		}
		out = append(out, store.ConfigError{File: file, Line: k.Line, Field: k.Value, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
			Message: fmt.Sprintf("MeshConfig %s is read but not applied by vmesh (applied: %s)", k.Value, strings.Join(slices.Sorted(maps.Keys(meshConfigApplied)), ", "))})
	}
	return out
}

// providerNode returns the extensionProviders entry of root named name,
// nil for none.
func providerNode(root *yaml.Node, name string) *yaml.Node {
	var provider *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "extensionProviders" || root.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for _, p := range root.Content[i+1].Content {
			if mapValue(p, "name") != nil && mapValue(p, "name").Value == name {
				provider = p
			}
		}
	}
	return provider
}

// providerKind is the kind of an extensionProviders entry (its key other
// than name: zipkin, envoyFileAccessLog, ...), and that key's node.
func providerKind(p *yaml.Node) (*yaml.Node, *yaml.Node) {
	for j := 0; j+1 < len(p.Content); j += 2 {
		if p.Content[j].Value != "name" {
			return p.Content[j], p.Content[j+1]
		}
	}
	return nil, nil
}

// tracingProviderWarnings checks defaultProviders.tracing (the sequence
// node list) against the extensionProviders of root: vmesh, as Istio, uses
// the first provider only; it must name a zipkin or opentelemetry provider
// the file defines, else Envoy proxies trace without one.
func tracingProviderWarnings(file string, root, list *yaml.Node) []store.ConfigError {
	if list.Kind != yaml.SequenceNode || len(list.Content) == 0 {
		return nil
	}
	warn := func(line int, field, format string, args ...any) store.ConfigError {
		return store.ConfigError{File: file, Line: line, Field: field, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied, Message: fmt.Sprintf(format, args...)}
	}
	var out []store.ConfigError
	for i, n := range list.Content[1:] {
		out = append(out, warn(n.Line, fmt.Sprintf("defaultProviders.tracing[%d]", i+1), "only the first tracing provider is used (as Istio): %q is not applied", n.Value))
	}
	first := list.Content[0]
	provider := providerNode(root, first.Value)
	if provider == nil {
		return append(out, warn(first.Line, "defaultProviders.tracing[0]", "no extensionProviders entry is named %q: Envoy proxies trace without a provider (spans go nowhere)", first.Value))
	}
	if k, _ := providerKind(provider); k != nil && k.Value != "zipkin" && k.Value != "opentelemetry" {
		out = append(out, warn(k.Line, "extensionProviders["+first.Value+"]."+k.Value, "defaultProviders.tracing names a %s provider: vmesh traces to zipkin and opentelemetry providers only, Envoy proxies trace without one", k.Value))
	}
	return out
}

// accessLogProviderWarnings checks defaultProviders.accessLogging (the
// sequence node list) against the extensionProviders of root: each entry
// must name an envoyFileAccessLog or envoyOtelAls provider the file
// defines (or Istio's built-in envoy), else nothing is logged to it.
func accessLogProviderWarnings(file string, root, list *yaml.Node) []store.ConfigError {
	if list.Kind != yaml.SequenceNode {
		return nil
	}
	var out []store.ConfigError
	for i, n := range list.Content {
		field := fmt.Sprintf("defaultProviders.accessLogging[%d]", i)
		provider := providerNode(root, n.Value)
		if provider == nil {
			if !strings.EqualFold(n.Value, "envoy") {
				out = append(out, store.ConfigError{File: file, Line: n.Line, Field: field, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
					Message: fmt.Sprintf("no extensionProviders entry is named %q: nothing is logged to it (as Istio)", n.Value)})
			}
			continue
		}
		if k, _ := providerKind(provider); k != nil && k.Value != "envoyFileAccessLog" && k.Value != "envoyOtelAls" {
			out = append(out, store.ConfigError{File: file, Line: n.Line, Field: field, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
				Message: fmt.Sprintf("provider %q (%s) is not applied: vmesh's Envoy proxies write access logs to envoyFileAccessLog and envoyOtelAls providers only", n.Value, k.Value)})
		}
	}
	return out
}

// tracerFieldWarnings names the fields of the zipkin and opentelemetry
// extension providers of root that vmesh's tracers do not send (a
// Telemetry or defaultProviders.tracing may name any of them), and the
// headers whose value comes from the control plane's environment.
func tracerFieldWarnings(file string, root *yaml.Node) []store.ConfigError {
	warn := func(line int, field, format string, args ...any) store.ConfigError {
		return store.ConfigError{File: file, Line: line, Field: field, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied, Message: fmt.Sprintf(format, args...)}
	}
	var out []store.ConfigError
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "extensionProviders" || root.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for _, provider := range root.Content[i+1].Content {
			name := ""
			if n := mapValue(provider, "name"); n != nil {
				name = n.Value
			}
			k, v := providerKind(provider)
			if k == nil || (k.Value != "zipkin" && k.Value != "opentelemetry") || v.Kind != yaml.MappingNode {
				continue
			}
			out = append(out, envHeaderWarnings(file, "extensionProviders["+name+"]."+k.Value, v)...)
			for f := 0; f+1 < len(v.Content); f += 2 {
				fk, fv := v.Content[f], v.Content[f+1]
				key := lowerCamel(fk.Value)
				switch {
				case k.Value == "zipkin" && !zipkinApplied[key]:
					out = append(out, warn(fk.Line, "extensionProviders["+name+"].zipkin."+fk.Value, "zipkin %s is not applied by vmesh", fk.Value))
				case k.Value == "zipkin":
				case key == "resourceDetectors":
					for r := 0; r+1 < len(fv.Content); r += 2 {
						if rk := fv.Content[r]; rk.Value != "environment" && rk.Value != "dynatrace" {
							out = append(out, warn(rk.Line, "extensionProviders["+name+"].opentelemetry."+fk.Value+"."+rk.Value, "OpenTelemetry resource detector %s is not applied by vmesh (applied: environment, dynatrace)", rk.Value))
						}
					}
				case !otelApplied[key]:
					out = append(out, warn(fk.Line, "extensionProviders["+name+"].opentelemetry."+fk.Value, "opentelemetry %s is not applied by vmesh", fk.Value))
				}
			}
		}
	}
	return out
}

// lowerCamel is a proto field's JSON name from its name (resource_detectors:
// resourceDetectors): the YAML of a mesh config may use either.
func lowerCamel(s string) string {
	var b strings.Builder
	up := false
	for _, r := range s {
		switch {
		case r == '_':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// envHeaderWarnings names the headers (and gRPC initial metadata) under n
// whose value is envName: Istio reads that variable of istiod's
// environment; vmesh sends the header empty.
func envHeaderWarnings(file, path string, n *yaml.Node) []store.ConfigError {
	var out []store.ConfigError
	var walk func(path string, n *yaml.Node)
	walk = func(path string, n *yaml.Node) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if k.Value == "envName" {
					out = append(out, store.ConfigError{File: file, Line: k.Line, Field: path + ".envName", Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
						Message: "a header value from the control plane's environment (envName) is not applied by vmesh: the header is sent empty (use value)"})
				}
				walk(path+"."+k.Value, n.Content[i+1])
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		}
	}
	walk(path, n)
	return out
}

// zipkinApplied and otelApplied are the fields of zipkin and opentelemetry
// extension providers Envoy proxies' tracers take.
var (
	zipkinApplied = map[string]bool{"service": true, "port": true, "maxTagLength": true, "enable64bitTraceId": true, "path": true,
		"traceContextOption": true, "timeout": true, "headers": true}
	otelApplied = map[string]bool{"service": true, "port": true, "maxTagLength": true, "http": true, "grpc": true}
)

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// jsonEncoding reports whether a mesh config's root mapping sets
// accessLogEncoding JSON.
func jsonEncoding(root *yaml.Node) bool {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "accessLogEncoding" {
			return strings.EqualFold(root.Content[i+1].Value, "JSON")
		}
	}
	return false
}

// isJSONObject reports whether s is a non-empty JSON object (a JSON access
// log format: field names to format strings).
func isJSONObject(s string) bool {
	var m map[string]any
	return json.Unmarshal([]byte(s), &m) == nil && len(m) > 0
}

// defaultConfigApplied are the defaultConfig (ProxyConfig) fields vmesh
// applies: `vmesh vm bundle` takes the discovery address and writes the
// proxy metadata into the bundle, whose agent puts ISTIO_META_* into its
// node metadata.
var defaultConfigApplied = map[string]bool{"discoveryAddress": true, "proxyMetadata": true}

// proxyTracingApplied are the defaultConfig.tracing fields Envoy proxies'
// connection managers take (Istio's configureTracing); the tracer
// addresses (zipkin, datadog, ...) go into Istio's bootstrap, which vmesh's
// agents do not write.
var proxyTracingApplied = map[string]bool{"sampling": true, "customTags": true, "maxPathTagLength": true, "enableIstioTags": true}

// locateMeshError finds the field protojson refused: the first key of the
// mapping whose value alone does not decode, looked for again inside it
// when it is a message of its own.
func locateMeshError(n *yaml.Node, md protoreflect.MessageDescriptor, path string) (int, string) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil || n.Kind != yaml.MappingNode {
		return 0, ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		var v any
		if val.Decode(&v) != nil {
			return k.Line, joinField(path, k.Value)
		}
		js, err := json.Marshal(map[string]any{k.Value: v})
		if err != nil || protojson.Unmarshal(js, mt.New().Interface()) == nil {
			continue
		}
		fd := md.Fields().ByJSONName(k.Value)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k.Value))
		}
		if fd != nil && fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() && val.Kind == yaml.MappingNode {
			if line, field := locateMeshError(val, fd.Message(), joinField(path, k.Value)); line > 0 {
				return line, field
			}
		}
		return k.Line, joinField(path, k.Value)
	}
	return 0, ""
}

func joinField(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// mergeMeshConfig applies user over defaults as istiod does (see
// DecodeMeshConfig).
func mergeMeshConfig(defaults, user *meshv1alpha1.MeshConfig) *meshv1alpha1.MeshConfig {
	out := proto.Clone(defaults).(*meshv1alpha1.MeshConfig)
	proxy := out.GetDefaultConfig()
	providers := out.GetExtensionProviders()
	outR := out.ProtoReflect()
	user.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		outR.Set(fd, v)
		return true
	})
	if pc := user.GetDefaultConfig(); pc != nil {
		merged := proto.Clone(proxy).(*meshv1alpha1.ProxyConfig)
		md := merged.GetProxyMetadata()
		proto.Merge(merged, pc)
		merged.ProxyMetadata = maps.Clone(md)
		if merged.ProxyMetadata == nil {
			merged.ProxyMetadata = map[string]string{}
		}
		maps.Copy(merged.ProxyMetadata, pc.GetProxyMetadata())
		out.DefaultConfig = merged
	}
	out.ExtensionProviders = providers
	for _, p := range user.GetExtensionProviders() {
		replaced := false
		for i, e := range out.ExtensionProviders {
			if e.GetName() == p.GetName() {
				out.ExtensionProviders[i] = p
				replaced = true
			}
		}
		if !replaced {
			out.ExtensionProviders = append(out.ExtensionProviders, p)
		}
	}
	return out
}

// trustDomainProblem says why td is no trust domain as Istio's
// ValidateTrustDomain checks one (DNS-1123 labels separated by dots, the
// last one may be empty: "example.org."), "" when it is one.
func trustDomainProblem(td string) string {
	if td == "" {
		return "empty"
	}
	labels := strings.Split(td, ".")
	for i, l := range labels {
		if i == len(labels)-1 && l == "" {
			return ""
		}
		if why := checkDNS1123Label(l); why != "" {
			return why
		}
	}
	return ""
}

// validateMeshConfig checks what vmesh reads of a mesh config, as Istio's
// agent.ValidateMeshConfig does for those fields.
func validateMeshConfig(mc *meshv1alpha1.MeshConfig) []meshProblem {
	var v meshProblems
	if d := mc.GetConnectTimeout(); d != nil && d.AsDuration() < time.Millisecond {
		v.add("connectTimeout", "must be at least 1ms, got %s", d.AsDuration())
	}
	if mc.GetRootNamespace() == "" || checkDNS1123Label(mc.GetRootNamespace()) != "" {
		v.add("rootNamespace", "%q is not a namespace name", mc.GetRootNamespace())
	}
	if td := mc.GetTrustDomain(); td == "" || strings.ContainsAny(td, "/:@ ") {
		v.add("trustDomain", "%q is not a trust domain", td)
	}
	if len(mc.GetMeshMTLS().GetEcdhCurves()) > 0 {
		v.add("meshMTLS.ecdhCurves", "mesh TLS does not support ECDH curves configuration")
	}
	for i, td := range mc.GetTrustDomainAliases() {
		if why := trustDomainProblem(td); why != "" {
			v.add(fmt.Sprintf("trustDomainAliases[%d]", i), "%q is not a trust domain: %s", td, why)
		}
	}
	if r := mc.GetDefaultHttpRetryPolicy(); r != nil && r.GetAttempts() < 0 {
		v.add("defaultHttpRetryPolicy.attempts", "must not be negative")
	}
	for _, f := range []struct {
		name string
		list []string
	}{{"defaultServiceExportTo", mc.GetDefaultServiceExportTo()}, {"defaultVirtualServiceExportTo", mc.GetDefaultVirtualServiceExportTo()}, {"defaultDestinationRuleExportTo", mc.GetDefaultDestinationRuleExportTo()}} {
		for i, e := range f.list {
			if e != "*" && e != "." && e != "~" && checkDNS1123Label(e) != "" {
				v.add(fmt.Sprintf("%s[%d]", f.name, i), "%q is not *, ., ~ or a namespace", e)
			}
		}
	}
	for i, p := range mc.GetExtensionProviders() {
		if p.GetName() == "" {
			v.add(fmt.Sprintf("extensionProviders[%d].name", i), "is required")
		}
		validateExtAuthzProvider(&v, fmt.Sprintf("extensionProviders[%d]", i), p)
	}
	return v
}

// meshProblem is one invalid field of a mesh config.
type meshProblem struct{ Field, Message string }

type meshProblems []meshProblem

func (p *meshProblems) add(field, format string, args ...any) {
	*p = append(*p, meshProblem{Field: field, Message: fmt.Sprintf(format, args...)})
}

// validateExtAuthzProvider applies Istio's checks of the ext_authz
// providers CUSTOM AuthorizationPolicies use
// (ValidateExtensionProviderEnvoyExtAuthzHTTP/GRPC): a service, a port
// 1-65535, a known HTTP statusOnError, a pathPrefix starting with "/".
func validateExtAuthzProvider(v *meshProblems, path string, p *meshv1alpha1.MeshConfig_ExtensionProvider) {
	var service, status string
	var port uint32
	switch {
	case p.GetEnvoyExtAuthzHttp() != nil:
		c := p.GetEnvoyExtAuthzHttp()
		path += ".envoyExtAuthzHttp"
		service, port, status = c.GetService(), c.GetPort(), c.GetStatusOnError()
		if pp := c.GetPathPrefix(); pp != "" && !strings.HasPrefix(pp, "/") {
			v.add(path+".pathPrefix", "should begin with `/` but found %q", pp)
		}
	case p.GetEnvoyExtAuthzGrpc() != nil:
		c := p.GetEnvoyExtAuthzGrpc()
		path += ".envoyExtAuthzGrpc"
		service, port, status = c.GetService(), c.GetPort(), c.GetStatusOnError()
	default:
		return
	}
	if service == "" {
		v.add(path+".service", "must not be empty")
	}
	if port == 0 || port > 65535 {
		v.add(path+".port", "port number %d must be in the range 1..65535", port)
	}
	if status != "" {
		code, err := strconv.Atoi(status)
		if err != nil || http.StatusText(code) == "" {
			v.add(path+".statusOnError", "unsupported statusOnError value %s", status)
		}
	}
}
