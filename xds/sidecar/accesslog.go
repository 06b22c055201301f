package sidecar

import (
	"fmt"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	reqwithoutqueryv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/formatter/req_without_query/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

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

// withAccessLog gives listeners the mesh's access log as Istio's sidecars
// have it: every HTTP connection manager and tcp_proxy logs to the file,
// and the capture listeners (virtualOutbound, virtualInbound) log the
// connections no chain takes (response flag NR); their loop guards log
// nothing.
func withAccessLog(ls []*listenerv3.Listener, m model.AccessLog) error {
	al := fileLog(m)
	if al == nil {
		return nil
	}
	for _, l := range ls {
		if l.Name == VirtualOutboundListener || l.Name == VirtualInboundListener {
			nr := proto.Clone(al).(*accesslogv3.AccessLog)
			nr.Filter = &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{
				ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: []string{"NR"}}}}
			l.AccessLog = []*accesslogv3.AccessLog{nr}
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
				if err := logFilter(f, al); err != nil {
					return fmt.Errorf("listener %s: chain %s: %w", l.Name, fc.Name, err)
				}
			}
		}
	}
	return nil
}

// logFilter sets the access log of an HCM or tcp_proxy filter.
func logFilter(f *listenerv3.Filter, al *accesslogv3.AccessLog) error {
	var m proto.Message
	switch f.Name {
	case hcmFilter:
		h := &hcmv3.HttpConnectionManager{}
		if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
			return err
		}
		h.AccessLog = []*accesslogv3.AccessLog{al}
		m = h
	case tcpProxyFilter:
		t := &tcpproxyv3.TcpProxy{}
		if err := f.GetTypedConfig().UnmarshalTo(t); err != nil {
			return err
		}
		t.AccessLog = []*accesslogv3.AccessLog{al}
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
