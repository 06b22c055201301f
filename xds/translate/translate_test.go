package translate_test

import (
	"testing"

	"github.com/vmesh/vmesh/xds/translate"
	networking "istio.io/api/networking/v1alpha3"
)

func TestRouteMatchPerClient(t *testing.T) {
	m := &networking.HTTPMatchRequest{
		Uri:         &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/api"}},
		Scheme:      &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: "https"}},
		Headers:     map[string]*networking.StringMatch{"X-User": {}},
		QueryParams: map[string]*networking.StringMatch{"v": {MatchType: &networking.StringMatch_Exact{Exact: "2"}}},
	}
	envoy := translate.RouteMatch(m, translate.Envoy)
	if envoy.GetPrefix() != "/api" || len(envoy.GetHeaders()) != 2 || len(envoy.GetQueryParameters()) != 1 {
		t.Errorf("Envoy match = %v", envoy)
	}
	if h := envoy.GetHeaders()[1]; h.GetName() != "x-user" || !h.GetPresentMatch() {
		t.Errorf("header without a match type = %v, want lower-cased presence", h)
	}
	// grpc-go ignores a whole route with query parameter matchers.
	grpc := translate.RouteMatch(m, translate.Proxyless)
	if len(grpc.GetQueryParameters()) != 0 || len(grpc.GetHeaders()) != 1 {
		t.Errorf("proxyless match = %v, want no query or :scheme matchers", grpc)
	}
}

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		p      *networking.Percent
		legacy int32
		want   uint32
	}{{nil, 0, 1_000_000}, {&networking.Percent{Value: 0.5}, 0, 5000}, {nil, 30, 300_000}, {&networking.Percent{Value: 250}, 0, 1_000_000}} {
		if got := translate.Percent(tc.p, tc.legacy).GetNumerator(); got != tc.want {
			t.Errorf("Percent(%v, %d) = %d, want %d", tc.p, tc.legacy, got, tc.want)
		}
	}
}

func TestFaultGRPCStatus(t *testing.T) {
	f := translate.Fault(&networking.HTTPFaultInjection{Abort: &networking.HTTPFaultInjection_Abort{
		ErrorType: &networking.HTTPFaultInjection_Abort_GrpcStatus{GrpcStatus: "unavailable"}}})
	if f.GetAbort().GetGrpcStatus() != 14 {
		t.Errorf("abort = %v, want gRPC status 14", f.GetAbort())
	}
}

// TestCatchAll: a translated match takes every request exactly when Istio's
// IsCatchAllRoute says so: path "/" as prefix (an empty match, a bare
// sourceLabels or port match, uri prefix "/") or regex ".*", and no header
// or query condition (method and authority are headers).
func TestCatchAll(t *testing.T) {
	prefix := func(p string) *networking.StringMatch {
		return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: p}}
	}
	for _, c := range []struct {
		name string
		m    *networking.HTTPMatchRequest
		want bool
	}{
		{"no match", nil, true},
		{"sourceLabels only", &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "a"}}, true},
		{"port only", &networking.HTTPMatchRequest{Port: 80}, true},
		{"uri prefix /", &networking.HTTPMatchRequest{Uri: prefix("/")}, true},
		{"uri prefix / ignoring case", &networking.HTTPMatchRequest{Uri: prefix("/"), IgnoreUriCase: true}, true},
		{"uri regex .*", &networking.HTTPMatchRequest{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: ".*"}}}, true},
		{"uri prefix /api", &networking.HTTPMatchRequest{Uri: prefix("/api")}, false},
		{"uri exact /", &networking.HTTPMatchRequest{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: "/"}}}, false},
		{"header", &networking.HTTPMatchRequest{Headers: map[string]*networking.StringMatch{"x-user": prefix("a")}}, false},
		{"method", &networking.HTTPMatchRequest{Method: &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: "GET"}}}, false},
		{"authority", &networking.HTTPMatchRequest{Authority: prefix("a")}, false},
		{"query", &networking.HTTPMatchRequest{QueryParams: map[string]*networking.StringMatch{"v": prefix("1")}}, false},
	} {
		if got := translate.CatchAll(translate.RouteMatch(c.m, translate.Envoy)); got != c.want {
			t.Errorf("%s: CatchAll = %v, want %v", c.name, got, c.want)
		}
	}
}
