package console

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Traffic defaults.
const (
	// DefaultTrafficWindow is the range rates are averaged over: at least
	// two scrapes of a Prometheus scraping every 15 s.
	DefaultTrafficWindow = time.Minute
	// DefaultTrafficTimeout bounds the queries of one page.
	DefaultTrafficTimeout = 3 * time.Second
	// maxErrorText bounds a Prometheus error shown on the page.
	maxErrorText = 240
)

// TrafficStatus is what the graph's rates come from and how the last
// query went.
type TrafficStatus struct {
	// Prometheus is the server's address, without credentials.
	Prometheus string
	// Window is the range the rates are averaged over.
	Window time.Duration
	// Error says why there are no rates (the server unreachable, a query
	// failed), or "".
	Error string
}

// trafficSource answers the rates of the graph's edges from a Prometheus
// server (the operator's --prometheus, never the config store).
type trafficSource struct {
	api      promv1.API
	redacted string
	window   time.Duration
	timeout  time.Duration
}

// WithPrometheus shows request and error rates on the graph, queried from
// the Prometheus server at rawURL over window (the rate's range; 0:
// DefaultTrafficWindow), each page's queries bounded by timeout (0:
// DefaultTrafficTimeout). An empty rawURL shows none.
func WithPrometheus(rawURL string, window, timeout time.Duration) Option {
	return func(c *Console) {
		c.trafficURL, c.trafficWindow, c.trafficTimeout = rawURL, window, timeout
	}
}

func newTrafficSource(rawURL string, window, timeout time.Duration) (*trafficSource, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("console: prometheus URL %q: want http(s)://host[:port][/path]", rawURL)
	}
	client, err := promapi.NewClient(promapi.Config{Address: rawURL})
	if err != nil {
		return nil, fmt.Errorf("console: prometheus: %w", err)
	}
	if window <= 0 {
		window = DefaultTrafficWindow
	}
	if timeout <= 0 {
		timeout = DefaultTrafficTimeout
	}
	return &trafficSource{api: promv1.NewAPI(client), redacted: u.Redacted(), window: window, timeout: timeout}, nil
}

// trafficSample is the rate of requests from one proxy (its node id, ""
// when the metrics do not name it) to one host's port and subset.
type trafficSample struct {
	node, host, port, subset string
	rate, errors             float64
}

// SourceLabel is the label that names the calling proxy in the metrics:
// its xDS node id, set by the scrape config on the target (Prometheus's
// static_configs labels, or relabeling).
const SourceLabel = "vmesh_node"

// query runs the rate queries for the hosts: grpc-go's OpenTelemetry
// metrics by grpc.target, and Envoy's cluster stats by cluster name.
func (t *trafficSource) query(ctx context.Context, hosts []string) (TrafficStatus, []trafficSample) {
	st := TrafficStatus{Prometheus: t.redacted, Window: t.window}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	w := model.Duration(t.window).String()
	grpcTotal := fmt.Sprintf(`sum by (%s, grpc_target) (rate(grpc_client_attempt_duration_seconds_count[%s]))`, SourceLabel, w)
	grpcErrors := fmt.Sprintf(`sum by (%s, grpc_target) (rate(grpc_client_attempt_duration_seconds_count{grpc_status!="OK"}[%s]))`, SourceLabel, w)
	samples := map[[4]string]*trafficSample{}
	add := func(expr string, errs bool, key func(model.Metric) ([4]string, bool)) error {
		v, _, _, err := t.api.Query(ctx, expr, time.Now())
		if err != nil {
			return err
		}
		vec, ok := v.(model.Vector)
		if !ok {
			return fmt.Errorf("query answered a %s, want a vector", v.Type())
		}
		for _, s := range vec {
			k, ok := key(s.Metric)
			if !ok {
				continue
			}
			x := samples[k]
			if x == nil {
				x = &trafficSample{node: k[0], host: k[1], port: k[2], subset: k[3]}
				samples[k] = x
			}
			if errs {
				x.errors += float64(s.Value)
			} else {
				x.rate += float64(s.Value)
			}
		}
		return nil
	}
	var errs []error
	for _, q := range []struct {
		expr string
		errs bool
	}{{grpcTotal, false}, {grpcErrors, true}} {
		if err := add(q.expr, q.errs, grpcKey); err != nil {
			errs = append(errs, err)
		}
	}
	if total, failed := envoyQueries(hosts, w); total != "" {
		for _, q := range []struct {
			expr string
			errs bool
		}{{total, false}, {failed, true}} {
			if err := add(q.expr, q.errs, envoyKey); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		st.Error = clipText("querying Prometheus: "+err.Error(), maxErrorText)
		return st, nil
	}
	out := make([]trafficSample, 0, len(samples))
	for _, s := range samples {
		out = append(out, *s)
	}
	return st, out
}

func clipText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// grpcKey reads a grpc-go series: grpc.target "xds:///host:port".
func grpcKey(m model.Metric) ([4]string, bool) {
	target := string(m["grpc_target"])
	rest, ok := strings.CutPrefix(target, "xds://")
	if !ok {
		return [4]string{}, false
	}
	// xds:///host:port, or xds://authority/host:port.
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[i+1:]
	}
	host, port, ok := strings.Cut(rest, ":")
	if !ok || host == "" {
		return [4]string{}, false
	}
	return [4]string{string(m[SourceLabel]), host, port, ""}, true
}

// hostRestLabel carries, on an Envoy series, the part of its cluster's
// host after the first dot (see envoyQueries).
const hostRestLabel = "vmesh_host_rest"

// envoyKey reads an Envoy cluster series back into its cluster name,
// outbound|port|subset|host.
func envoyKey(m model.Metric) ([4]string, bool) {
	name := string(m["envoy_cluster_name"])
	if rest := string(m[hostRestLabel]); rest != "" {
		name += "." + rest
	}
	parts := strings.Split(name, "|")
	if len(parts) != 4 || parts[0] != "outbound" || parts[3] == "" {
		return [4]string{}, false
	}
	return [4]string{string(m[SourceLabel]), parts[3], parts[1], parts[2]}, true
}

// envoyQueries builds the queries of Envoy's upstream requests and 5xx
// answers per cluster. Upstream Envoy's default tag extractor takes a
// cluster's name up to its first dot (^cluster\.((.+?)\.)), so cluster
// outbound|9080|v1|reviews.default.svc puts "outbound|9080|v1|reviews" in
// envoy_cluster_name and the rest in the metric's name:
// envoy_cluster_default_svc_upstream_rq_total. One query per such rest of
// the known hosts, each marked with the rest (hostRestLabel), joined by
// "or".
func envoyQueries(hosts []string, window string) (total, failed string) {
	var rests []string
	for _, h := range hosts {
		if _, rest, ok := strings.Cut(h, "."); ok && validHost(rest) && !slices.Contains(rests, rest) {
			rests = append(rests, rest)
		}
	}
	slices.Sort(rests)
	by := SourceLabel + ", envoy_cluster_name"
	t := []string{fmt.Sprintf(`sum by (%s) (rate(envoy_cluster_upstream_rq_total[%s]))`, by, window)}
	f := []string{fmt.Sprintf(`sum by (%s) (rate(envoy_cluster_upstream_rq_xx{envoy_response_code_class="5"}[%s]))`, by, window)}
	for _, rest := range rests {
		metric := "envoy_cluster_" + promName(rest)
		t = append(t, fmt.Sprintf(`label_replace(sum by (%s) (rate(%s_upstream_rq_total[%s])), %q, %s, "", "")`, by, metric, window, hostRestLabel, strconv.Quote(rest)))
		f = append(f, fmt.Sprintf(`label_replace(sum by (%s) (rate(%s_upstream_rq_xx{envoy_response_code_class="5"}[%s])), %q, %s, "", "")`, by, metric, window, hostRestLabel, strconv.Quote(rest)))
	}
	return strings.Join(t, " or "), strings.Join(f, " or ")
}

// validHost: letters, digits, '-' and '.', as a DNS name.
func validHost(h string) bool {
	return h != "" && !strings.ContainsFunc(h, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.')
	})
}

// promName is Envoy's Prometheus name of a stat name part: every
// character but letters, digits, '_' and ':' becomes '_'.
func promName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == ':' {
			return r
		}
		return '_'
	}, s)
}

// traffic draws the samples: an edge from each caller (its node, or an
// unknown caller) to the host, and the rates of a subset on the route
// edge to it.
func (b *graphBuilder) traffic(samples []trafficSample) {
	for _, e := range b.edges {
		if e.Kind == EdgeRoute {
			e.HasRate = true
		}
	}
	for _, s := range samples {
		from := b.byProxy[s.node]
		switch {
		case from != "":
		case s.node != "":
			from = "src:" + s.node
			b.node(from, func() *GraphNode {
				return &GraphNode{Kind: NodeUnknown, Label: s.node, Detail: "not connected now"}
			})
		default:
			from = "unknown"
			b.node(from, func() *GraphNode {
				return &GraphNode{Kind: NodeUnknown, Label: "unknown", Detail: "series without " + SourceLabel}
			})
		}
		to := ServiceNodeID(s.host)
		if _, ok := b.nodes[to]; !ok {
			to = "ext:" + s.host
			b.node(to, func() *GraphNode {
				return &GraphNode{Kind: NodeExternal, Label: s.host, Detail: "no ServiceEntry"}
			})
		}
		e := b.edge(from, to, EdgeTraffic)
		e.HasRate = true
		e.Rate += s.rate
		e.Errors += s.errors
		if r, ok := b.edges[[2]string{to, SubsetNodeID(s.host, s.subset)}]; ok {
			r.Rate += s.rate
			r.Errors += s.errors
		}
	}
}
