package dnsproxy_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/agents/dnsproxy"
	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/xds/nds"
)

// Upstream is a tiny authoritative resolver standing for the VM's own
// (the resolv.conf nameserver): every A query gets 192.0.2.<n>, n = the
// number of queries so far, over UDP and TCP.
type Upstream struct {
	Addr  string
	mu    sync.Mutex
	names []string
}

// StartUpstream serves on 127.0.0.1 (UDP and TCP, one port).
func StartUpstream(t *testing.T) *Upstream {
	t.Helper()
	u := &Upstream{}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	u.Addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		u.mu.Lock()
		u.names = append(u.names, r.Question[0].Name)
		u.mu.Unlock()
		if r.Question[0].Qtype == dns.TypeA && r.Question[0].Name == "www.example.org." {
			rr, _ := dns.NewRR("www.example.org. 60 IN A 192.0.2.80")
			m.Answer = append(m.Answer, rr)
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	udp, tcp := &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: lis, Handler: h}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	t.Cleanup(func() { _ = udp.Shutdown(); _ = tcp.Shutdown() })
	return u
}

// Asked returns the names the upstream was asked for.
func (u *Upstream) Asked() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.names)
}

func query(t *testing.T, proto, addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: proto, Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s query %s: %v", proto, name, err)
	}
	return r
}

func answers(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *dns.A:
			out = append(out, v.A.String())
		case *dns.AAAA:
			out = append(out, v.AAAA.String())
		case *dns.CNAME:
			out = append(out, "CNAME "+v.Target)
		}
	}
	return out
}

var table = nds.Table{
	"reviews.default.svc.cluster.local": {IPs: []string{"240.240.0.7"}, Registry: nds.RegistryKubernetes, Shortname: "reviews", Namespace: "default"},
	"ratings.other.svc.cluster.local":   {IPs: []string{"240.240.0.8", "2001:2::8"}, Registry: nds.RegistryKubernetes, Shortname: "ratings", Namespace: "other"},
	"db.example.com":                    {IPs: []string{"10.1.2.3"}, Registry: nds.RegistryExternal},
}

func start(t *testing.T, upstream string) (*dnsproxy.Proxy, *prometheus.Registry) {
	t.Helper()
	rc := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(rc, []byte("nameserver 127.0.0.1\nsearch corp.example\noptions ndots:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	p, err := dnsproxy.New(dnsproxy.Config{Addr: "127.0.0.1:0", ResolvConf: rc, Upstreams: []string{upstream}, Namespace: "default"}, agenttest.Logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Search(); !slices.Equal(got, []string{"corp.example"}) {
		t.Fatalf("search domains %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-p.Listening():
	case err := <-done:
		t.Fatal(err)
	}
	return p, reg
}

// TestAnswersMeshHostsForwardsTheRest: over UDP and TCP, mesh hosts are
// answered from the name table (full name, short forms for the VM's
// namespace, name.namespace for another, search-domain expansion as a
// CNAME), an existing name without records of the type gets NODATA, and
// everything else is the upstream's answer; an update is answered at once.
func TestAnswersMeshHostsForwardsTheRest(t *testing.T) {
	up := StartUpstream(t)
	p, _ := start(t, up.Addr)
	p.Update(table)
	for _, proto := range []string{"udp", "tcp"} {
		t.Run(proto, func(t *testing.T) {
			cases := []struct {
				name  string
				qtype uint16
				want  []string
				rcode int
			}{
				{name: "reviews.default.svc.cluster.local", qtype: dns.TypeA, want: []string{"240.240.0.7"}},
				{name: "REVIEWS.default.svc.cluster.local", qtype: dns.TypeA, want: []string{"240.240.0.7"}},
				{name: "reviews", qtype: dns.TypeA, want: []string{"CNAME reviews.default.svc.cluster.local.", "240.240.0.7"}},
				{name: "reviews.default", qtype: dns.TypeA, want: []string{"CNAME reviews.default.svc.cluster.local.", "240.240.0.7"}},
				{name: "reviews.default.svc", qtype: dns.TypeA, want: []string{"CNAME reviews.default.svc.cluster.local.", "240.240.0.7"}},
				{name: "reviews.corp.example", qtype: dns.TypeA, want: []string{"CNAME reviews.default.svc.cluster.local.", "240.240.0.7"}},
				{name: "reviews.default.corp.example", qtype: dns.TypeA, want: []string{"CNAME reviews.default.svc.cluster.local.", "240.240.0.7"}},
				{name: "reviews.default.svc.cluster.local", qtype: dns.TypeAAAA, want: nil},
				{name: "ratings.other", qtype: dns.TypeAAAA, want: []string{"CNAME ratings.other.svc.cluster.local.", "2001:2::8"}},
				{name: "db.example.com", qtype: dns.TypeA, want: []string{"10.1.2.3"}},
				{name: "db.example.com", qtype: dns.TypeTXT, want: nil},
				{name: "www.example.org", qtype: dns.TypeA, want: []string{"192.0.2.80"}},
				{name: "ratings", qtype: dns.TypeA, rcode: dns.RcodeNameError}, // another namespace: not short
				{name: "nothing.example.org", qtype: dns.TypeA, rcode: dns.RcodeNameError},
			}
			for _, c := range cases {
				r := query(t, proto, p.Addr(), c.name, c.qtype)
				if r.Rcode != c.rcode || !slices.Equal(answers(r), c.want) {
					t.Errorf("%s %s: rcode %s answers %v, want %s %v", c.name, dns.TypeToString[c.qtype], dns.RcodeToString[r.Rcode], answers(r), dns.RcodeToString[c.rcode], c.want)
				}
			}
		})
	}
	if asked := up.Asked(); !slices.Contains(asked, "www.example.org.") || slices.Contains(asked, "reviews.default.svc.cluster.local.") {
		t.Errorf("upstream asked %v: want the non-mesh names only", asked)
	}
	// A change of address is answered as soon as the table arrives.
	next := nds.Table{"reviews.default.svc.cluster.local": {IPs: []string{"10.4.4.4"}, Registry: nds.RegistryKubernetes, Shortname: "reviews", Namespace: "default"}}
	p.Update(next)
	if r := query(t, "udp", p.Addr(), "reviews.default.svc.cluster.local", dns.TypeA); !slices.Equal(answers(r), []string{"10.4.4.4"}) {
		t.Errorf("after update: %v", answers(r))
	}
	if r := query(t, "udp", p.Addr(), "db.example.com", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Errorf("a host gone from the table: %s %v, want the upstream's NXDOMAIN", dns.RcodeToString[r.Rcode], answers(r))
	}
}

func TestUpstreamDownIsServfail(t *testing.T) {
	pc, _ := net.ListenPacket("udp", "127.0.0.1:0")
	dead := pc.LocalAddr().String()
	pc.Close()
	rc := filepath.Join(t.TempDir(), "resolv.conf")
	_ = os.WriteFile(rc, []byte("nameserver 127.0.0.1\n"), 0o644)
	p, err := dnsproxy.New(dnsproxy.Config{Addr: "127.0.0.1:0", ResolvConf: rc, Upstreams: []string{dead}, Timeout: 300 * time.Millisecond}, agenttest.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx) }()
	<-p.Listening()
	if r := query(t, "udp", p.Addr(), "www.example.org", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
}
