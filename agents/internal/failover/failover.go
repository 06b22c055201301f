// Package failover dials a control plane that runs as several replicas:
// the agent's CA client and xDS proxy reach the first replica of a list that
// answers, and a new connection after a replica died goes to the next.
package failover

import (
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// scheme names the per-connection resolver Dial builds (never registered
// globally).
const scheme = "vmesh-failover"

// Split parses a comma-separated address list ("a:15012,b:15012"), dropping
// blanks.
func Split(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Validate checks that every address is host:port.
func Validate(addrs []string) error {
	if len(addrs) == 0 {
		return fmt.Errorf("failover: no address")
	}
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("failover: %q is not host:port", a)
		}
	}
	return nil
}

// Dial returns a client connection to the replicas at addrs. One address
// is dialled as is. Several get a resolver of this connection's own that
// lists them in order, with pick_first: the connection uses the first that
// accepts, and when it breaks (the replica died) the next connect tries
// them in order again, so a live one takes over. Each address's TLS name
// is its host, unless the transport credentials set a ServerName.
func Dial(addrs []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if err := Validate(addrs); err != nil {
		return nil, err
	}
	if len(addrs) == 1 {
		return grpc.NewClient(addrs[0], opts...)
	}
	r := manual.NewBuilderWithScheme(scheme)
	state := resolver.State{}
	for _, a := range addrs {
		host, _, _ := net.SplitHostPort(a)
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: host})
	}
	r.InitialState(state)
	opts = append(opts, grpc.WithResolvers(r), grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"pick_first":{}}]}`))
	cc, err := grpc.NewClient(scheme+":///"+strings.Join(addrs, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("failover: dial %v: %w", addrs, err)
	}
	return cc, nil
}
