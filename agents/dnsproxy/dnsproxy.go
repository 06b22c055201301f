// Package dnsproxy is the agent's DNS proxy, as Istio's agent has one: it
// answers A and AAAA queries for the mesh's hosts from the name table the
// control plane serves over xDS (NDS, xds/nds) and forwards every other
// query to the upstream resolvers of /etc/resolv.conf, over UDP and TCP
// alike. Traffic capture (agents/capture) sends the VM's DNS (port 53)
// here; the proxy's own upstream sockets carry the capture's mark, so they
// are not captured again.
//
// Names answered for a host h with entry ni, as Istio's agent does:
//
//   - h itself;
//   - for h = name.namespace.svc.<domain> (ni.Shortname, ni.Namespace):
//     "name.namespace" and "name.namespace.svc", and "name" when the VM is in
//     that namespace;
//   - ni.AltHosts;
//   - each of those followed by each search domain of resolv.conf, answered
//     with a CNAME to the host, then its addresses (what a stub resolver
//     asks for "reviews" on a VM whose search list is "corp.example").
package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/vmesh/vmesh/xds/nds"
)

// Defaults.
const (
	DefaultAddr       = "127.0.0.1:15053"
	DefaultResolvConf = "/etc/resolv.conf"
	// TTL of the answers for mesh hosts (Istio's 30 s).
	TTL = 30
)

// Config configures a Proxy.
type Config struct {
	// Addr is where the proxy listens, UDP and TCP; default DefaultAddr.
	Addr string
	// ResolvConf names the resolver configuration whose nameservers are
	// the upstreams and whose search domains expand short names; default
	// DefaultResolvConf.
	ResolvConf string
	// Upstreams, when set, replace the resolv.conf nameservers (host:port).
	Upstreams []string
	// Namespace is the VM's namespace: "name" answers for
	// name.<Namespace>.svc.<domain>.
	Namespace string
	// Mark, when not zero, is set (SO_MARK) on upstream sockets so the
	// capture rules let them through.
	Mark uint32
	// Timeout bounds one upstream exchange; default 5 s.
	Timeout time.Duration
}

// Proxy is a DNS proxy. Update it with the name table; Run serves.
type Proxy struct {
	cfg       Config
	log       *slog.Logger
	met       *metrics
	upstreams []string
	search    []string

	table atomic.Pointer[lookup]

	mu        sync.Mutex
	listening chan struct{}
	addr      string
	markWarn  sync.Once
}

// lookup is one name table in the form the proxy answers from.
type lookup struct {
	table nds.Table
	// names maps each answered name (lower case, with the final dot) to
	// the host it stands for (with the final dot).
	names map[string]string
	v4    map[string][]netip.Addr // by host with the final dot
	v6    map[string][]netip.Addr
}

// New reads the resolver configuration and returns a proxy with an empty
// name table. Metrics are registered on reg when it is not nil.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Proxy, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = DefaultResolvConf
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	p := &Proxy{cfg: cfg, log: logger, met: newMetrics(reg), listening: make(chan struct{})}
	rc, err := dns.ClientConfigFromFile(cfg.ResolvConf)
	switch {
	case err == nil:
		for _, s := range rc.Servers {
			p.upstreams = append(p.upstreams, net.JoinHostPort(s, rc.Port))
		}
		for _, s := range rc.Search {
			if s = strings.Trim(strings.ToLower(s), "."); s != "" {
				p.search = append(p.search, s)
			}
		}
	case len(cfg.Upstreams) == 0:
		// Mesh names are still answered; the rest get SERVFAIL until the
		// agent restarts with a resolver configuration.
		logger.Warn("no upstream resolvers: only mesh names are answered", "resolv_conf", cfg.ResolvConf, "error", err)
	}
	if len(cfg.Upstreams) > 0 {
		p.upstreams = slices.Clone(cfg.Upstreams)
	}
	for _, u := range p.upstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			return nil, fmt.Errorf("dnsproxy: upstream %q: %w", u, err)
		}
	}
	p.table.Store(p.build(nds.Table{}))
	return p, nil
}

// Upstreams returns the resolvers non-mesh queries go to.
func (p *Proxy) Upstreams() []string { return slices.Clone(p.upstreams) }

// Search returns the search domains short names are expanded with.
func (p *Proxy) Search() []string { return slices.Clone(p.search) }

// Update replaces the name table; queries after it returns see the new one.
func (p *Proxy) Update(t nds.Table) {
	p.table.Store(p.build(t))
	p.met.hosts.Set(float64(len(t)))
	p.met.updates.Inc()
}

// Table returns the current name table.
func (p *Proxy) Table() nds.Table { return maps.Clone(p.table.Load().table) }

// Names returns every name the proxy answers and the host it stands for.
func (p *Proxy) Names() map[string]string { return maps.Clone(p.table.Load().names) }

func fqdn(s string) string { return dns.Fqdn(strings.ToLower(s)) }

func (p *Proxy) build(t nds.Table) *lookup {
	l := &lookup{table: maps.Clone(t), names: map[string]string{}, v4: map[string][]netip.Addr{}, v6: map[string][]netip.Addr{}}
	// Hosts first, so a host's own name never becomes another's alias.
	hosts := slices.Sorted(maps.Keys(t))
	for _, h := range hosts {
		l.names[fqdn(h)] = fqdn(h)
	}
	for _, h := range hosts {
		ni, host := t[h], fqdn(h)
		for _, s := range ni.IPs {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if a.Unmap().Is4() {
				l.v4[host] = append(l.v4[host], a.Unmap())
			} else {
				l.v6[host] = append(l.v6[host], a)
			}
		}
		var alts []string
		if ni.Shortname != "" && ni.Namespace != "" {
			alts = append(alts, ni.Shortname+"."+ni.Namespace, ni.Shortname+"."+ni.Namespace+".svc")
			if ni.Namespace == p.cfg.Namespace {
				alts = append(alts, ni.Shortname)
			}
		}
		alts = append(alts, ni.AltHosts...)
		add := func(n string) {
			n = fqdn(n)
			if _, taken := l.names[n]; !taken {
				l.names[n] = host
			}
		}
		for _, a := range alts {
			add(a)
		}
		for _, a := range append([]string{h}, alts...) {
			for _, s := range p.search {
				add(strings.TrimSuffix(a, ".") + "." + s)
			}
		}
	}
	return l
}

// Addr returns the address the proxy listens on, once Listening is closed.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Listening is closed once both sockets listen.
func (p *Proxy) Listening() <-chan struct{} { return p.listening }

// Run serves DNS over UDP and TCP until ctx is done.
func (p *Proxy) Run(ctx context.Context) error {
	pc, err := net.ListenPacket("udp", p.cfg.Addr)
	if err != nil {
		return fmt.Errorf("dnsproxy: listen udp %s: %w", p.cfg.Addr, err)
	}
	tcpAddr := p.cfg.Addr
	if _, port, _ := net.SplitHostPort(p.cfg.Addr); port == "0" {
		tcpAddr = pc.LocalAddr().String() // one port for both
	}
	lis, err := net.Listen("tcp", tcpAddr)
	if err != nil {
		pc.Close()
		return fmt.Errorf("dnsproxy: listen tcp %s: %w", tcpAddr, err)
	}
	udp := &dns.Server{PacketConn: pc, Handler: p.handler("udp")}
	tcp := &dns.Server{Listener: lis, Handler: p.handler("tcp")}
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	started := make(chan struct{}, 2)
	for _, s := range []*dns.Server{udp, tcp} {
		s.NotifyStartedFunc = func() { started <- struct{}{} }
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.ActivateAndServe(); err != nil {
				errc <- err
			}
		}()
	}
	for range 2 {
		select {
		case <-started:
		case err := <-errc:
			_ = udp.Shutdown()
			_ = tcp.Shutdown()
			wg.Wait()
			return fmt.Errorf("dnsproxy: %w", err)
		}
	}
	p.mu.Lock()
	p.addr = pc.LocalAddr().String()
	p.mu.Unlock()
	close(p.listening)
	p.log.Info("DNS proxy serving", "listen", p.addr, "upstreams", p.upstreams, "search", p.search)
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-errc:
		runErr = fmt.Errorf("dnsproxy: %w", err)
	}
	_ = udp.Shutdown()
	_ = tcp.Shutdown()
	wg.Wait()
	return runErr
}

func (p *Proxy) handler(proto string) dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		resp, kind := p.answer(req, proto)
		p.met.requests.WithLabelValues(proto, kind).Inc()
		if proto == "udp" {
			resp.Truncate(udpSize(req))
		}
		_ = w.WriteMsg(resp)
	})
}

func udpSize(req *dns.Msg) int {
	if o := req.IsEdns0(); o != nil {
		return int(o.UDPSize())
	}
	return dns.MinMsgSize
}

// answer returns the response to req and how it was answered: "mesh",
// "forwarded" or "error".
func (p *Proxy) answer(req *dns.Msg, proto string) (*dns.Msg, string) {
	if len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeNotImplemented)
		return m, "error"
	}
	q := req.Question[0]
	if q.Qclass == dns.ClassINET {
		if m := p.meshAnswer(req, q); m != nil {
			return m, "mesh"
		}
	}
	m, err := p.forward(req, proto)
	if err != nil {
		p.met.upstreamFailures.Inc()
		p.log.Debug("DNS upstream failed", "name", q.Name, "error", err)
		m = new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
		return m, "error"
	}
	return m, "forwarded"
}

// meshAnswer answers q from the name table, or returns nil for a name that
// is not the mesh's.
func (p *Proxy) meshAnswer(req *dns.Msg, q dns.Question) *dns.Msg {
	l := p.table.Load()
	name := strings.ToLower(q.Name)
	host, ok := l.names[name]
	if !ok {
		return nil
	}
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	var addrs []netip.Addr
	switch q.Qtype {
	case dns.TypeA:
		addrs = l.v4[host]
	case dns.TypeAAAA:
		addrs = l.v6[host]
	case dns.TypeCNAME:
	default:
		return m // the name exists: no records of that type (NODATA)
	}
	if host != name {
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: TTL}, Target: host})
	}
	for _, a := range addrs {
		hdr := dns.RR_Header{Name: host, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: TTL}
		if q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
		} else {
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
		}
	}
	return m
}

// forward sends req to the upstreams in turn over proto (UDP retried over
// TCP when truncated) and returns the first answer.
func (p *Proxy) forward(req *dns.Msg, proto string) (*dns.Msg, error) {
	if len(p.upstreams) == 0 {
		return nil, errors.New("no upstream resolvers")
	}
	var errs []error
	for _, u := range p.upstreams {
		start := time.Now()
		resp, err := p.exchange(req, proto, u)
		if err == nil && resp.Truncated && proto == "udp" {
			resp, err = p.exchange(req, "tcp", u)
		}
		p.met.upstreamSeconds.Observe(time.Since(start).Seconds())
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", u, err))
	}
	return nil, errors.Join(errs...)
}

func (p *Proxy) exchange(req *dns.Msg, proto, upstream string) (*dns.Msg, error) {
	d := &net.Dialer{Timeout: p.cfg.Timeout}
	if p.cfg.Mark != 0 {
		d.Control = p.markControl
	}
	c := &dns.Client{Net: proto, Dialer: d, Timeout: p.cfg.Timeout, UDPSize: dns.DefaultMsgSize}
	resp, _, err := c.Exchange(req, upstream)
	return resp, err
}

// markControl sets the capture's mark on an upstream socket; without the
// privilege to (CAP_NET_ADMIN) there is no capture to escape either.
func (p *Proxy) markControl(_, _ string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(p.cfg.Mark)) }); err != nil {
		return err
	}
	if serr != nil {
		p.markWarn.Do(func() {
			p.log.Warn("cannot mark DNS upstream sockets (SO_MARK); captured DNS would loop", "error", serr)
		})
	}
	return nil
}
