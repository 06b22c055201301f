package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/xds"
)

// proxyConfigKinds maps each `vmesh proxy-config` subcommand to the xDS
// type whose resources it lists.
var proxyConfigKinds = []struct {
	use, short, typ string
	aliases         []string
}{
	{"listeners", "The listeners a proxy holds (LDS)", "LDS", []string{"listener", "l"}},
	{"routes", "The route configurations a proxy holds (RDS)", "RDS", []string{"route", "r"}},
	{"clusters", "The clusters a proxy holds (CDS)", "CDS", []string{"cluster", "c"}},
	{"endpoints", "The endpoints a proxy holds (EDS)", "EDS", []string{"endpoint", "ep"}},
	{"secrets", "The certificates a proxy's config refers to (served to it by its agent, not over this xDS stream)", "", []string{"secret", "s"}},
}

func newProxyConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "proxy-config listeners|routes|clusters|endpoints|secrets PROXY",
		Aliases: []string{"pc"},
		Short:   "Show the config a connected proxy holds (like istioctl proxy-config)",
		Long: `proxy-config prints what one connected proxy holds: the resources vmesh
delivered on its xDS streams, as tables like istioctl's, or with -o json|yaml
as Envoy's JSON (the same messages the proxy received). A type the proxy
rejected (NACK) is named on stderr: the proxy keeps its previous version of
it, and what is shown is the version it rejected.`,
	}
	for _, k := range proxyConfigKinds {
		var server, output, name string
		sub := &cobra.Command{
			Use:               k.use + " PROXY",
			Aliases:           k.aliases,
			Short:             k.short,
			Args:              cobra.ExactArgs(1),
			ValidArgsFunction: completeProxyIDs(&server),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, apps, err := resolveProxy(server, args[0])
				if err != nil {
					return err
				}
				if apps > 1 {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: %d applications share the node id %s: what they hold is shown merged\n", apps, id)
				}
				args[0] = id
				held, err := readHeld(server, id)
				if err != nil {
					return err
				}
				for _, t := range []string{"LDS", "RDS", "CDS", "EDS"} {
					if st := held.status[t]; st != nil && st.Nack != "" && (k.typ == t || k.typ == "") {
						fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s rejected %s version %s: %s\n", args[0], t, st.NackVersion, st.Nack)
					}
				}
				pc := proxyConfig{held: held, name: name}
				if k.typ == "" {
					rows := pc.secrets()
					return writeOutput(cmd.OutOrStdout(), output, rows, func(tw *tabwriter.Writer) error { return secretsTable(tw, rows) })
				}
				msgs, err := pc.resources(k.typ)
				if err != nil {
					return err
				}
				if output != "table" {
					return writeResources(cmd, output, msgs)
				}
				return writeOutput(cmd.OutOrStdout(), "table", nil, func(tw *tabwriter.Writer) error { return resourceTable(tw, k.typ, msgs) })
			},
		}
		sub.Flags().StringVar(&server, "server", "127.0.0.1:15014", "HTTP address of the replica the proxy is connected to")
		sub.Flags().StringVar(&name, "name", "", "only the resource with this name")
		outputFlag(sub, &output)
		cmd.AddCommand(sub)
	}
	return cmd
}

// resolveProxy finds the connected proxy PROXY names: its node id, or,
// when no node has that id, the one node whose Istio-style id
// (type~IP~id~domain) carries that IP or whose id starts with it. Several
// nodes matching is an error listing them (proxies sharing an IP); apps
// counts the node's application streams (not its VM agent's own).
func resolveProxy(server, name string) (id string, apps int, err error) {
	st, err := syncz(server)
	if err != nil {
		return "", 0, err
	}
	streams := map[string]int{}
	var ids []string
	for _, s := range st {
		if _, ok := streams[s.ID]; !ok {
			ids = append(ids, s.ID)
			streams[s.ID] = 0
		}
		if !isAgentStream(s) {
			streams[s.ID]++
		}
	}
	if _, ok := streams[name]; ok {
		return name, streams[name], nil
	}
	var match []string
	for _, candidate := range ids {
		parts := strings.Split(candidate, "~")
		if strings.HasPrefix(candidate, name) || len(parts) == 4 && parts[1] == name {
			match = append(match, candidate)
		}
	}
	slices.Sort(match)
	switch len(match) {
	case 0:
		return "", 0, fmt.Errorf("no connected proxy with id %s on %s (vmesh status lists them)", name, server)
	case 1:
		return match[0], streams[match[0]], nil
	}
	return "", 0, fmt.Errorf("%q is ambiguous: %d connected proxies match it (%s); give the full node id", name, len(match), strings.Join(match, ", "))
}

// heldConfig is what /debug/config_dump and /debug/syncz say of one proxy.
type heldConfig struct {
	dump   xds.ConfigDump
	status map[string]*xds.TypeStatus
}

func readHeld(server, id string) (*heldConfig, error) {
	h := &heldConfig{status: map[string]*xds.TypeStatus{}}
	if err := getJSON(server, "/debug/config_dump?proxy="+url.QueryEscape(id), &h.dump); err != nil {
		return nil, err
	}
	st, err := syncz(server)
	if err != nil {
		return nil, err
	}
	for _, s := range st {
		if s.ID == id {
			for t, ts := range s.Types {
				h.status[t] = ts
			}
		}
	}
	return h, nil
}

type proxyConfig struct {
	held *heldConfig
	name string
}

// newMessage returns an empty message of an xDS type.
func newMessage(typ string) proto.Message {
	switch typ {
	case "LDS":
		return &listenerv3.Listener{}
	case "RDS":
		return &routev3.RouteConfiguration{}
	case "CDS":
		return &clusterv3.Cluster{}
	default:
		return &endpointv3.ClusterLoadAssignment{}
	}
}

// resources decodes the proxy's resources of a type, sorted by name.
func (pc proxyConfig) resources(typ string) ([]proto.Message, error) {
	byName := pc.held.dump.Resources[typ]
	var out []proto.Message
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		if pc.name != "" && n != pc.name {
			continue
		}
		m := newMessage(typ)
		if err := protojson.Unmarshal(byName[n], m); err != nil {
			return nil, fmt.Errorf("%s %s: %w", typ, n, err)
		}
		out = append(out, m)
	}
	if pc.name != "" && len(out) == 0 {
		return nil, fmt.Errorf("the proxy holds no %s named %q", typ, pc.name)
	}
	return out, nil
}

// writeResources prints resources as a JSON array of Envoy's JSON, or the
// same as YAML.
func writeResources(cmd *cobra.Command, output string, msgs []proto.Message) error {
	list := make([]json.RawMessage, 0, len(msgs))
	for _, m := range msgs {
		b, err := protojson.Marshal(m)
		if err != nil {
			return err
		}
		list = append(list, b)
	}
	return writeOutput(cmd.OutOrStdout(), output, list, nil)
}

func resourceTable(tw *tabwriter.Writer, typ string, msgs []proto.Message) error {
	switch typ {
	case "LDS":
		fmt.Fprintln(tw, "NAME\tADDRESS\tPORT\tMATCH\tDESTINATION")
		for _, m := range msgs {
			l := m.(*listenerv3.Listener)
			addr, port := "-", "-"
			if sa := l.GetAddress().GetSocketAddress(); sa != nil {
				addr, port = sa.GetAddress(), fmt.Sprint(sa.GetPortValue())
			}
			if l.GetApiListener() != nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.GetName(), addr, port, "API listener", hcmDestination(l.GetApiListener().GetApiListener().GetValue()))
				continue
			}
			for _, fc := range l.GetFilterChains() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.GetName(), addr, port, chainMatch(fc.GetFilterChainMatch()), chainDestination(fc))
			}
			if len(l.GetFilterChains()) == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\n", l.GetName(), addr, port)
			}
		}
	case "RDS":
		fmt.Fprintln(tw, "NAME\tVHOST NAME\tDOMAINS\tMATCH\tDESTINATION")
		for _, m := range msgs {
			rc := m.(*routev3.RouteConfiguration)
			for _, vh := range rc.GetVirtualHosts() {
				domains := strings.Join(vh.GetDomains(), ",")
				for _, r := range vh.GetRoutes() {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", rc.GetName(), vh.GetName(), domains, routeMatch(r.GetMatch()), vhostDestination(vh, r))
				}
				if len(vh.GetRoutes()) == 0 {
					fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\n", rc.GetName(), vh.GetName(), domains)
				}
			}
		}
	case "CDS":
		fmt.Fprintln(tw, "NAME\tSERVICE FQDN\tPORT\tSUBSET\tDIRECTION\tTYPE")
		for _, m := range msgs {
			c := m.(*clusterv3.Cluster)
			dir, port, subset, host := "-", "-", "-", "-"
			if parts := strings.Split(c.GetName(), "|"); len(parts) == 4 {
				dir, port, subset, host = parts[0], parts[1], cmp.Or(parts[2], "-"), parts[3]
			}
			typ := c.GetType().String()
			if ct := c.GetClusterType(); ct != nil {
				typ = ct.GetName()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.GetName(), host, port, subset, dir, typ)
		}
	case "EDS":
		fmt.Fprintln(tw, "ENDPOINT\tSTATUS\tWEIGHT\tLOCALITY\tCLUSTER")
		for _, m := range msgs {
			cla := m.(*endpointv3.ClusterLoadAssignment)
			for _, le := range cla.GetEndpoints() {
				loc := localityString(le.GetLocality())
				for _, e := range le.GetLbEndpoints() {
					sa := e.GetEndpoint().GetAddress().GetSocketAddress()
					weight := "-"
					if w := e.GetLoadBalancingWeight(); w != nil {
						weight = fmt.Sprint(w.GetValue())
					}
					fmt.Fprintf(tw, "%s:%d\t%s\t%s\t%s\t%s\n", sa.GetAddress(), sa.GetPortValue(), e.GetHealthStatus(), weight, loc, cla.GetClusterName())
				}
			}
			if len(cla.GetEndpoints()) == 0 {
				fmt.Fprintf(tw, "-\tno endpoints\t-\t-\t%s\n", cla.GetClusterName())
			}
		}
	}
	return nil
}

func localityString(l *corev3.Locality) string {
	if l == nil || l.GetRegion()+l.GetZone()+l.GetSubZone() == "" {
		return "-"
	}
	return strings.TrimRight(l.GetRegion()+"/"+l.GetZone()+"/"+l.GetSubZone(), "/")
}

// hcmDestination says where an HTTP connection manager's routes come from.
func hcmDestination(b []byte) string {
	var hcm hcmv3.HttpConnectionManager
	if proto.Unmarshal(b, &hcm) != nil {
		return "-"
	}
	if rds := hcm.GetRds(); rds != nil {
		return "Route: " + rds.GetRouteConfigName()
	}
	if rc := hcm.GetRouteConfig(); rc != nil {
		return "Inline Route: " + rc.GetName()
	}
	return "-"
}

func chainMatch(m *listenerv3.FilterChainMatch) string {
	if m == nil {
		return "ALL"
	}
	var parts []string
	if p := m.GetDestinationPort(); p != nil {
		parts = append(parts, fmt.Sprintf("port=%d", p.GetValue()))
	}
	if len(m.GetServerNames()) > 0 {
		parts = append(parts, "SNI="+strings.Join(m.GetServerNames(), ","))
	}
	if t := m.GetTransportProtocol(); t != "" {
		parts = append(parts, "transport="+t)
	}
	if len(m.GetApplicationProtocols()) > 0 {
		parts = append(parts, "ALPN="+strings.Join(m.GetApplicationProtocols(), ","))
	}
	if len(parts) == 0 {
		return "ALL"
	}
	return strings.Join(parts, "; ")
}

func chainDestination(fc *listenerv3.FilterChain) string {
	for _, f := range fc.GetFilters() {
		switch f.GetName() {
		case "envoy.filters.network.http_connection_manager":
			return hcmDestination(f.GetTypedConfig().GetValue())
		case "envoy.filters.network.tcp_proxy":
			return "TCP proxy"
		}
	}
	return "-"
}

func routeMatch(m *routev3.RouteMatch) string {
	var s string
	switch {
	case m.GetPrefix() != "":
		s = m.GetPrefix() + "*"
	case m.GetPath() != "":
		s = m.GetPath()
	case m.GetSafeRegex() != nil:
		s = "regex " + m.GetSafeRegex().GetRegex()
	case m.GetPathSeparatedPrefix() != "":
		s = m.GetPathSeparatedPrefix() + "/*"
	default:
		s = "/*"
	}
	if n := len(m.GetHeaders()); n > 0 {
		s += fmt.Sprintf(" +%d header(s)", n)
	}
	return s
}

// vhostDestination is where a virtual host's route sends a request: a
// virtual host that requires TLS (a Gateway server's httpsRedirect)
// redirects plain HTTP to HTTPS before any route applies.
func vhostDestination(vh *routev3.VirtualHost, r *routev3.Route) string {
	switch vh.GetRequireTls() {
	case routev3.VirtualHost_ALL:
		return "redirect to https"
	case routev3.VirtualHost_EXTERNAL_ONLY:
		return "redirect to https (external requests), else " + routeDestination(r)
	}
	return routeDestination(r)
}

func routeDestination(r *routev3.Route) string {
	switch a := r.GetAction().(type) {
	case *routev3.Route_Route:
		if c := a.Route.GetCluster(); c != "" {
			return c
		}
		var ws []string
		for _, c := range a.Route.GetWeightedClusters().GetClusters() {
			ws = append(ws, fmt.Sprintf("%s:%d", c.GetName(), c.GetWeight().GetValue()))
		}
		return strings.Join(ws, ", ")
	case *routev3.Route_DirectResponse:
		return fmt.Sprintf("direct response %d", a.DirectResponse.GetStatus())
	case *routev3.Route_Redirect:
		return "redirect"
	case *routev3.Route_NonForwardingAction:
		return "non-forwarding"
	}
	return "-"
}

// secretRow is a certificate a proxy's config refers to.
type secretRow struct {
	// Name is the SDS secret or certificate provider instance name.
	Name string `json:"name"`
	// Type is "certificate" (the proxy's own) or "trust bundle".
	Type string `json:"type"`
	// Source is where the proxy gets it: its agent's SDS, or a
	// certificate provider of its gRPC bootstrap (the files the agent
	// writes).
	Source string `json:"source"`
	// UsedBy lists the listeners and clusters that refer to it.
	UsedBy []string `json:"usedBy"`
}

// secrets lists the certificates the proxy's listeners and clusters refer
// to. vmesh's xDS stream carries no key material: an Envoy gets it from its
// agent's SDS, a proxyless client from the files its bootstrap's
// certificate providers name.
func (pc proxyConfig) secrets() []secretRow {
	rows := map[[2]string]*secretRow{}
	add := func(name, typ, source, user string) {
		if name == "" {
			return
		}
		k := [2]string{name, typ}
		r := rows[k]
		if r == nil {
			r = &secretRow{Name: name, Type: typ, Source: source}
			rows[k] = r
		}
		if !slices.Contains(r.UsedBy, user) {
			r.UsedBy = append(r.UsedBy, user)
		}
	}
	visit := func(common *tlsv3.CommonTlsContext, user string) {
		if common == nil {
			return
		}
		for _, s := range common.GetTlsCertificateSdsSecretConfigs() {
			add(s.GetName(), "certificate", "agent SDS", user)
		}
		if p := common.GetTlsCertificateProviderInstance(); p != nil {
			add(p.GetInstanceName(), "certificate", "bootstrap certificate provider", user)
		}
		switch v := common.GetValidationContextType().(type) {
		case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
			add(v.ValidationContextSdsSecretConfig.GetName(), "trust bundle", "agent SDS", user)
		case *tlsv3.CommonTlsContext_CombinedValidationContext:
			add(v.CombinedValidationContext.GetValidationContextSdsSecretConfig().GetName(), "trust bundle", "agent SDS", user)
			if p := v.CombinedValidationContext.GetDefaultValidationContext().GetCaCertificateProviderInstance(); p != nil {
				add(p.GetInstanceName(), "trust bundle", "bootstrap certificate provider", user)
			}
		case *tlsv3.CommonTlsContext_ValidationContext:
			if p := v.ValidationContext.GetCaCertificateProviderInstance(); p != nil {
				add(p.GetInstanceName(), "trust bundle", "bootstrap certificate provider", user)
			}
		}
	}
	if ls, err := pc.resources("LDS"); err == nil {
		for _, m := range ls {
			l := m.(*listenerv3.Listener)
			for _, fc := range l.GetFilterChains() {
				var d tlsv3.DownstreamTlsContext
				if fc.GetTransportSocket() != nil && proto.Unmarshal(fc.GetTransportSocket().GetTypedConfig().GetValue(), &d) == nil {
					visit(d.GetCommonTlsContext(), "listener "+l.GetName())
				}
			}
		}
	}
	if cs, err := pc.resources("CDS"); err == nil {
		for _, m := range cs {
			c := m.(*clusterv3.Cluster)
			sockets := []*corev3.TransportSocket{c.GetTransportSocket()}
			for _, tm := range c.GetTransportSocketMatches() {
				sockets = append(sockets, tm.GetTransportSocket())
			}
			for _, ts := range sockets {
				var u tlsv3.UpstreamTlsContext
				if ts != nil && proto.Unmarshal(ts.GetTypedConfig().GetValue(), &u) == nil {
					visit(u.GetCommonTlsContext(), "cluster "+c.GetName())
				}
			}
		}
	}
	out := make([]secretRow, 0, len(rows))
	for _, r := range rows {
		slices.Sort(r.UsedBy)
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b secretRow) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Type, b.Type)) })
	return out
}

func secretsTable(tw *tabwriter.Writer, rows []secretRow) error {
	fmt.Fprintln(tw, "RESOURCE NAME\tTYPE\tSOURCE\tUSED BY")
	for _, r := range rows {
		used := fmt.Sprintf("%d: %s", len(r.UsedBy), r.UsedBy[0])
		if len(r.UsedBy) > 1 {
			used += ", …"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.Type, r.Source, used)
	}
	return nil
}
