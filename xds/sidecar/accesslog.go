package sidecar

import (
	"fmt"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	reqwithoutqueryv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/formatter/req_without_query/v3"
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
// kinds than envoyFileAccessLog are left out (the analysis warns, VM1022).
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
		f := c.Provider.GetEnvoyFileAccessLog()
		if f == nil {
			continue
		}
		var al *accesslogv3.AccessLog
		if c.Provider.GetName() == "envoy" && f.GetLogFormat() == nil && !f.GetOmitEmptyValues() {
			// Istio's built-in provider takes the mesh config's format.
			ml := m.AccessLog
			ml.File = f.GetPath()
			al = fileLog(ml)
		} else {
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

func isLabels(f *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider) bool {
	_, ok := f.GetLogFormat().GetLogFormat().(*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider_LogFormat_Labels)
	return ok
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
			l.AccessLog = nil
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
				l.AccessLog = append(l.AccessLog, nr)
			}
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
