package sidecar

import (
	"fmt"
	"sort"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	grpcalv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	otelalv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	reqwithoutqueryv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/formatter/req_without_query/v3"
	otlpcommonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/vmesh/vmesh/model"
)

// Istio's default access log formats (pilot's EnvoyTextLogFormat and
// EnvoyJSONLogFormatIstio), which MeshConfig's accessLogFormat replaces.
const istioTextLogFormat = `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS% ` +
	`%RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% "%UPSTREAM_TRANSPORT_FAILURE_REASON%" %BYTES_RECEIVED% %BYTES_SENT% ` +
	`%DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" ` +
	`"%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%" %UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% ` +
	`%DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%` + "\n"

var istioJSONLogFields = map[string]string{
	"authority": "%REQ(:AUTHORITY)%", "bytes_received": "%BYTES_RECEIVED%", "bytes_sent": "%BYTES_SENT%",
	"connection_termination_details": "%CONNECTION_TERMINATION_DETAILS%", "downstream_local_address": "%DOWNSTREAM_LOCAL_ADDRESS%",
	"downstream_remote_address": "%DOWNSTREAM_REMOTE_ADDRESS%", "duration": "%DURATION%", "method": "%REQ(:METHOD)%",
	"path": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "protocol": "%PROTOCOL%", "request_id": "%REQ(X-REQUEST-ID)%",
	"requested_server_name": "%REQUESTED_SERVER_NAME%", "response_code": "%RESPONSE_CODE%", "response_code_details": "%RESPONSE_CODE_DETAILS%",
	"response_flags": "%RESPONSE_FLAGS%", "route_name": "%ROUTE_NAME%", "start_time": "%START_TIME%", "upstream_cluster": "%UPSTREAM_CLUSTER_RAW%",
	"upstream_host": "%UPSTREAM_HOST%", "upstream_local_address": "%UPSTREAM_LOCAL_ADDRESS%",
	"upstream_service_time": "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%", "upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
	"user_agent": "%REQ(USER-AGENT)%", "x_forwarded_for": "%REQ(X-FORWARDED-FOR)%",
}

const (
	fileAccessLog       = "envoy.access_loggers.file"
	reqWithoutQuery     = "envoy.formatter.req_without_query"
	reqWithoutQueryWord = "%REQ_WITHOUT_QUERY"
)

// fileLog is the file access log a mesh asks for (nil for none), as
// Istio's FileAccessLogFromMeshConfig builds it: the format's text with a
// newline at its end, or its JSON fields; Istio's own format when none is
// set or a JSON one does not parse (filestore warns about that).
func fileLog(m model.AccessLog) *accesslogv3.AccessLog {
	if m.File == "" {
		return nil
	}
	f := &corev3.SubstitutionFormatString{}
	uses := false
	if m.JSON {
		fields := &structpb.Struct{}
		if m.Format == "" || protojson.Unmarshal([]byte(m.Format), fields) != nil || len(fields.GetFields()) == 0 {
			fields = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			for k, v := range istioJSONLogFields {
				fields.Fields[k] = structpb.NewStringValue(v)
			}
		}
		for _, v := range fields.GetFields() {
			uses = uses || strings.Contains(v.GetStringValue(), reqWithoutQueryWord)
		}
		f.Format = &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: fields}
		f.JsonFormatOptions = &corev3.JsonFormatOptions{}
	} else {
		text := istioTextLogFormat
		if m.Format != "" {
			text = m.Format
			if !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
		}
		uses = strings.Contains(text, reqWithoutQueryWord)
		f.Format = &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: text}}}
	}
	if uses {
		f.Formatters = []*corev3.TypedExtensionConfig{{Name: reqWithoutQuery, TypedConfig: mustAny(&reqwithoutqueryv3.ReqWithoutQuery{})}}
	}
	return &accesslogv3.AccessLog{Name: fileAccessLog, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(&filev3.FileAccessLog{
		Path:            m.File,
		AccessLogFormat: &filev3.FileAccessLog_LogFormat{LogFormat: f},
	})}}
}

// accessLogs are the access logs of one side of the proxy (server: its
// inbound listener), as Istio's AccessLogBuilder sets them: with no
// Telemetry and no defaultProviders.accessLogging, the mesh config's
// accessLogFile; else one log per provider the Telemetries (or the
// defaults) leave enabled, with the entry's CEL filter. Providers of other
// kinds than envoyFileAccessLog and envoyOtelAls are left out (the
// analysis warns, VM1023), and so is an envoyOtelAls provider whose
// service the proxy has no cluster for (as Istio).
func accessLogs(v *model.View, server bool) []*accesslogv3.AccessLog {
	m := v.Mesh()
	cfgs := model.TelemetryAccessLogs(m, v.Telemetries(), server)
	if cfgs == nil {
		if al := fileLog(m.AccessLog); al != nil {
			return []*accesslogv3.AccessLog{al}
		}
		return nil
	}
	var out []*accesslogv3.AccessLog
	for _, c := range cfgs {
		if c.Disabled {
			continue
		}
		var al *accesslogv3.AccessLog
		f := c.Provider.GetEnvoyFileAccessLog()
		switch {
		case c.Provider.GetEnvoyOtelAls() != nil:
			al = otelLog(v, c.Provider.GetEnvoyOtelAls())
		case f == nil:
			continue
		case c.Provider.GetName() == "envoy" && f.GetLogFormat() == nil && !f.GetOmitEmptyValues():
			// Istio's built-in provider takes the mesh config's format.
			ml := m.AccessLog
			ml.File = f.GetPath()
			al = fileLog(ml)
		default:
			al = providerFileLog(f)
		}
		if al == nil {
			continue
		}
		if c.Filter != "" {
			al.Filter = &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ExtensionFilter{ExtensionFilter: &accesslogv3.ExtensionFilter{
				Name: celLogFilter, ConfigType: &accesslogv3.ExtensionFilter_TypedConfig{TypedConfig: mustAny(&celv3.ExpressionFilter{Expression: c.Filter})}}}}
		}
		out = append(out, al)
	}
	return out
}

// providerFileLog is an envoyFileAccessLog provider's log (Istio's
// fileAccessLogFromTelemetry): its path (default /dev/stdout), its text
// format (Istio's when none) or JSON labels (Istio's when none), and
// omitEmptyValues.
func providerFileLog(f *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider) *accesslogv3.AccessLog {
	path := f.GetPath()
	if path == "" {
		path = "/dev/stdout"
	}
	sf := &corev3.SubstitutionFormatString{OmitEmptyValues: f.GetOmitEmptyValues()}
	uses := false
	if labels := f.GetLogFormat().GetLabels(); isLabels(f) {
		if len(labels.GetFields()) == 0 {
			labels = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			for k, v := range istioJSONLogFields {
				labels.Fields[k] = structpb.NewStringValue(v)
			}
		}
		for _, v := range labels.GetFields() {
			uses = uses || strings.Contains(v.GetStringValue(), reqWithoutQueryWord)
		}
		sf.Format = &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: labels}
		sf.JsonFormatOptions = &corev3.JsonFormatOptions{}
	} else {
		text := f.GetLogFormat().GetText()
		if text == "" {
			text = istioTextLogFormat
		} else if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		uses = strings.Contains(text, reqWithoutQueryWord)
		sf.Format = &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: text}}}
	}
	if uses {
		sf.Formatters = []*corev3.TypedExtensionConfig{{Name: reqWithoutQuery, TypedConfig: mustAny(&reqwithoutqueryv3.ReqWithoutQuery{})}}
	}
	return &accesslogv3.AccessLog{Name: fileAccessLog, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(&filev3.FileAccessLog{
		Path: path, AccessLogFormat: &filev3.FileAccessLog_LogFormat{LogFormat: sf}})}}
}

// AccessLogCollectors are the hosts of the services a router's access
// logs go to (its envoyOtelAls providers): a router, which has the
// clusters of the services its routes name only, adds theirs.
func AccessLogCollectors(v *model.View) []string {
	var out []string
	for _, c := range model.TelemetryAccessLogs(v.Mesh(), v.Telemetries(), false) {
		p := c.Provider.GetEnvoyOtelAls()
		if p == nil || c.Disabled {
			continue
		}
		if h, _, err := ProviderCluster(v, p.GetService(), p.GetPort()); err == nil {
			out = append(out, h)
		}
	}
	return out
}

// otelLogName is the log name of an envoyOtelAls provider that names
// none, and otelLogger Envoy's OpenTelemetry access logger.
const (
	otelLogName = "otel_envoy_accesslog"
	otelLogger  = "envoy.access_loggers.open_telemetry"
)

// otelLog is an envoyOtelAls provider's access log, as Istio's
// openTelemetryLog builds it: OTLP over gRPC to the outbound cluster of
// the provider's service, the provider's log name, its text format (Istio's
// when none) as each record's body and its labels as attributes, the peer
// metadata filter state Istio logs, no built-in labels. nil when no
// service of the proxy's is the provider's (Istio leaves it out too).
func otelLog(v *model.View, p *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyOpenTelemetryLogProvider) *accesslogv3.AccessLog {
	host, cluster, err := ProviderCluster(v, p.GetService(), p.GetPort())
	if err != nil {
		return nil
	}
	name := p.GetLogName()
	if name == "" {
		name = otelLogName
	}
	text := istioTextLogFormat
	if t := p.GetLogFormat().GetText(); t != "" {
		text = t
	}
	cfg := &otelalv3.OpenTelemetryAccessLogConfig{
		//lint:ignore SA1019 deprecated for grpc_service and log_name, still read by Envoy; what Istio sends (the oracle compares it)
		CommonConfig: &grpcalv3.CommonGrpcAccessLogConfig{
			LogName: name,
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
				ClusterName: cluster, Authority: host}}},
			TransportApiVersion: corev3.ApiVersion_V3,
			// The peers' metadata Istio's metadata exchange leaves in the
			// filter state (vmesh's proxies have none: empty).
			FilterStateObjectsToLog: []string{"upstream_peer", "downstream_peer", "wasm.upstream_peer", "wasm.upstream_peer_id", "wasm.downstream_peer", "wasm.downstream_peer_id"},
		},
		DisableBuiltinLabels: true,
		Body:                 &otlpcommonv1.AnyValue{Value: &otlpcommonv1.AnyValue_StringValue{StringValue: text}},
	}
	uses := strings.Contains(text, reqWithoutQueryWord)
	if labels := p.GetLogFormat().GetLabels().GetFields(); len(labels) > 0 {
		keys := make([]string, 0, len(labels))
		for k := range labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		cfg.Attributes = &otlpcommonv1.KeyValueList{}
		for _, k := range keys {
			val := labels[k].GetStringValue()
			uses = uses || strings.Contains(val, reqWithoutQueryWord)
			cfg.Attributes.Values = append(cfg.Attributes.Values, &otlpcommonv1.KeyValue{Key: k, Value: &otlpcommonv1.AnyValue{Value: &otlpcommonv1.AnyValue_StringValue{StringValue: val}}})
		}
	}
	if uses {
		cfg.Formatters = []*corev3.TypedExtensionConfig{{Name: reqWithoutQuery, TypedConfig: mustAny(&reqwithoutqueryv3.ReqWithoutQuery{})}}
	}
	return &accesslogv3.AccessLog{Name: otelLogger, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(cfg)}}
}

func isLabels(f *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider) bool {
	_, ok := f.GetLogFormat().GetLogFormat().(*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider_LogFormat_Labels)
	return ok
}

// RouterAccessLogs gives a router's listeners the access logs of Istio's
// gateways: those of the Telemetries that apply to its workload, in CLIENT
// mode (Istio's workloadMode of a gateway), else the mesh config's
// accessLogFile, on every HTTP connection manager and tcp_proxy, and on
// each listener for the connections no chain takes (response flag NR).
func RouterAccessLogs(v *model.View, ls []*listenerv3.Listener) error {
	als := accessLogs(v, false)
	if err := withAccessLog(ls, als); err != nil {
		return err
	}
	for _, l := range ls {
		l.AccessLog = noRouteLogs(als)
	}
	return nil
}

// noRouteLogs are the listener-level copies of als, which log the
// connections no filter chain takes: response flag NR, and each log's own
// filter (Istio's listener access logs); nil for none.
func noRouteLogs(als []*accesslogv3.AccessLog) []*accesslogv3.AccessLog {
	var out []*accesslogv3.AccessLog
	for _, al := range als {
		nr := proto.Clone(al).(*accesslogv3.AccessLog)
		flag := &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{
			ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: []string{"NR"}}}}
		if nr.Filter == nil {
			nr.Filter = flag
		} else {
			nr.Filter = &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{
				Filters: []*accesslogv3.AccessLogFilter{flag, nr.Filter}}}}
		}
		out = append(out, nr)
	}
	return out
}

// celLogFilter is Envoy's CEL access log filter, which a Telemetry's
// accessLogging filter expression becomes.
const celLogFilter = "envoy.access_loggers.extension_filters.cel"

// withAccessLog gives listeners the access logs als as Istio's sidecars
// have them: every HTTP connection manager and tcp_proxy logs to each, and
// the capture listeners (virtualOutbound, virtualInbound) log the
// connections no chain takes (response flag NR, and the log's own filter);
// their loop guards log nothing.
func withAccessLog(ls []*listenerv3.Listener, als []*accesslogv3.AccessLog) error {
	if len(als) == 0 {
		return nil
	}
	for _, l := range ls {
		if l.Name == VirtualOutboundListener || l.Name == VirtualInboundListener {
			l.AccessLog = noRouteLogs(als)
		}
		chains := l.FilterChains
		if l.DefaultFilterChain != nil {
			chains = append(chains[:len(chains):len(chains)], l.DefaultFilterChain)
		}
		for _, fc := range chains {
			if strings.HasSuffix(fc.Name, loopGuardSuffix) {
				continue
			}
			for _, f := range fc.Filters {
				if err := logFilter(f, als); err != nil {
					return fmt.Errorf("listener %s: chain %s: %w", l.Name, fc.Name, err)
				}
			}
		}
	}
	return nil
}

// logFilter sets the access log of an HCM or tcp_proxy filter.
func logFilter(f *listenerv3.Filter, als []*accesslogv3.AccessLog) error {
	var m proto.Message
	switch f.Name {
	case hcmFilter:
		h := &hcmv3.HttpConnectionManager{}
		if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
			return err
		}
		h.AccessLog = als
		m = h
	case tcpProxyFilter:
		t := &tcpproxyv3.TcpProxy{}
		if err := f.GetTypedConfig().UnmarshalTo(t); err != nil {
			return err
		}
		t.AccessLog = als
		m = t
	default:
		return nil
	}
	a, err := anypb.New(m)
	if err != nil {
		return err
	}
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
	return nil
}
