package loadgen

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable prints the report as one table: per server its connect phase
// and each change kind, then the ratios vmesh/<server> for every other server that ran.
func (r *Report) WriteTable(w io.Writer) error {
	o := r.Options
	fmt.Fprintf(w, "config: %d services x %d endpoints, %d VirtualServices+DestinationRules, %d namespaces; %d proxies (%.0f%% delta, %.0f%% Envoy-like, %d streams/conn)\n",
		o.Size.Services, o.Size.Endpoints, o.Size.VirtualServices, o.Size.Namespaces, o.Proxies, 100*o.DeltaFraction, 100*o.EnvoyFraction, o.StreamsPerConn)
	if o.Shape.sidecarShape() {
		fmt.Fprintf(w, "shape: %s (the Envoy-like proxies are Envoy sidecars)\n", o.Shape)
	}
	if o.Shape == ShapeRouter {
		fmt.Fprintf(w, "shape: %s (the Envoy-like proxies are replicas of one ingress gateway; every VirtualService is bound to its Gateway only, route configuration %s)\n", o.Shape, GatewayRouteName)
	}
	switch o.Source {
	case SourceDir, "":
		fmt.Fprintln(w, "source: dir (vmesh: each change is a file write to the directory it watches; debounce = directory + push debounce); the go-control-plane and Istio servers are fed by the harness (files, then POST /prepare and the measured POST /apply)")
	case SourceGit:
		fmt.Fprintln(w, "source: git (vmesh: each change is a commit + push to a bare repository + a signed webhook call, timed from before the commit; debounce = push debounce only); the baseline is fed by the harness as always (files + SetSnapshot)")
	case SourceZooKeeper:
		fmt.Fprintf(w, "source: zookeeper %s (vmesh: endpoints are Dubbo providers, an endpoint change is one ZooKeeper multi (delete + create), debounce = push debounce only; VirtualService changes stay file writes); the baseline is fed by the harness as always (files + SetSnapshot)\n", o.ZooKeeper)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tphase\tACKs\tmissing\tp50\tp99\tmax\tdebounce\tp99-debounce\tapply\tbytes\tserver CPU\tharness CPU\tmemory\t")
	for _, s := range r.Servers {
		fmt.Fprintf(tw, "%s\tconnect\t%d\t-\t-\t-\t%s\t-\t-\t-\t%s\t%s\t%s\trss %s -> %s (%s/proxy), peak %s\t\n",
			s.Server, s.Proxies, s.Connect.Duration.Round(time.Millisecond), Bytes(s.Connect.Bytes), s.Connect.CPU, s.Connect.HarnessCPU.Round(10*time.Millisecond),
			MiB(s.IdleRSS), MiB(s.ConnectedRSS), Bytes(s.RSSPerProxy), MiB(s.PeakRSS))
		for _, c := range s.Changes {
			fmt.Fprintf(tw, "%s\t%s x%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s/chg\t%s/chg\t%s/chg\t\t\n",
				s.Server, c.Kind, c.Changes, c.Latency.N, c.Missing, ms(c.Latency.P50), ms(c.Latency.P99), ms(c.Latency.Max),
				ms(c.Debounce), ms(max(c.Latency.P99-c.Debounce, 0)), ms(c.ApplyPerChange),
				Bytes(c.BytesPerChange), c.CPUPerChange.Round(time.Millisecond), c.HarnessCPUPerChange.Round(time.Millisecond))
		}
		if b := s.Burst; b != nil {
			fmt.Fprintf(tw, "%s	endpoint burst x%d in %s									%s/chg	%s/chg			\n",
				s.Server, b.Changes, b.Span, Bytes(b.BytesPerChange), b.CPUPerChange.Round(time.Millisecond))
		}
	}
	for _, other := range r.Servers {
		v, b := r.server(ServerVmesh), &other
		if v == nil || b.Server == ServerVmesh {
			continue
		}
		name := "vmesh/" + b.Server
		fmt.Fprintf(tw, "%s\tconnect\t\t\t\t\t%s\t\t\t\t%s\t%s\t\trss/proxy %s, peak %s\t\n", name,
			ratio(float64(v.Connect.Duration), float64(b.Connect.Duration)), ratio(float64(v.Connect.Bytes), float64(b.Connect.Bytes)),
			ratio(float64(v.Connect.CPU), float64(b.Connect.CPU)), ratio(float64(v.RSSPerProxy), float64(b.RSSPerProxy)),
			ratio(float64(v.PeakRSS), float64(b.PeakRSS)))
		for i, vc := range v.Changes {
			if i >= len(b.Changes) {
				break
			}
			bc := b.Changes[i]
			fmt.Fprintf(tw, "%s\t%s\t\t\t%s\t%s\t%s\t\t%s\t\t%s\t%s\t\t\t\n", name, vc.Kind,
				ratio(float64(vc.Latency.P50), float64(bc.Latency.P50)), ratio(float64(vc.Latency.P99), float64(bc.Latency.P99)),
				ratio(float64(vc.Latency.Max), float64(bc.Latency.Max)),
				ratio(float64(max(vc.Latency.P99-vc.Debounce, 0)), float64(bc.Latency.P99)),
				ratio(float64(vc.BytesPerChange), float64(bc.BytesPerChange)), ratio(float64(vc.CPUPerChange), float64(bc.CPUPerChange)))
		}
		if v.Burst != nil && b.Burst != nil {
			fmt.Fprintf(tw, "%s	endpoint burst									%s	%s			\n", name,
				ratio(float64(v.Burst.BytesPerChange), float64(b.Burst.BytesPerChange)), ratio(float64(v.Burst.CPUPerChange), float64(b.Burst.CPUPerChange)))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Servers {
		for _, e := range s.Errors {
			fmt.Fprintf(w, "%s: proxy error: %s\n", s.Server, e)
		}
	}
	return nil
}

func (r *Report) server(kind string) *ServerReport {
	for i := range r.Servers {
		if r.Servers[i].Server == kind {
			return &r.Servers[i]
		}
	}
	return nil
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}
