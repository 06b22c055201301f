package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
)

// OnboardingRequest is what `vmesh vm bundle` and `vmesh token create` are
// about to mint, as the query of /debug/onboarding.
type OnboardingRequest struct {
	Namespace, ServiceAccount, WorkloadGroup string
	// DiscoveryAddress is the host:port the VM will dial; empty for a
	// token alone.
	DiscoveryAddress string
	// TrustDomain is the one asked for on the command line; empty takes
	// the CA's.
	TrustDomain string
}

// Query renders r as the query of /debug/onboarding.
func (r OnboardingRequest) Query() url.Values {
	return url.Values{
		"namespace": {r.Namespace}, "serviceAccount": {r.ServiceAccount}, "workloadGroup": {r.WorkloadGroup},
		"discoveryAddress": {r.DiscoveryAddress}, "trustDomain": {r.TrustDomain},
	}
}

// OnboardingCheck is the answer of /debug/onboarding: everything that would
// make the VM fail to join, each with the fix.
type OnboardingCheck struct {
	// TrustDomain is the CA's.
	TrustDomain string `json:"trustDomain"`
	// SecureAddr is where the secure port listens.
	SecureAddr string `json:"secureAddr"`
	// Problems is empty when the VM would join.
	Problems []OnboardingProblem `json:"problems"`
	// DiscoveryAddress is the mesh config's defaultConfig.discoveryAddress
	// when it sets one (not Istio's default): `vmesh vm bundle` uses it when
	// --discovery-address is not given.
	DiscoveryAddress string `json:"discoveryAddress,omitempty"`
	// ProxyMetadata is the mesh config's defaultConfig.proxyMetadata, which
	// `vmesh vm bundle` writes into the bundle.
	ProxyMetadata map[string]string `json:"proxyMetadata,omitempty"`
}

// OnboardingProblem is one reason a VM onboarded this way would not join.
type OnboardingProblem struct {
	// Flag is the command-line flag at fault, e.g. "--workload-group".
	Flag string `json:"flag"`
	// Message says what is wrong, Fix what to do about it.
	Message string `json:"message"`
	Fix     string `json:"fix"`
}

// CheckOnboarding checks a VM's onboarding against this control plane: the
// trust domain, the WorkloadGroup and the ServiceEntry that selects it (in
// the config being served), the group's service account, and whether the
// discovery address reaches the secure port under a name its certificate
// carries.
func (cp *ControlPlane) CheckOnboarding(req OnboardingRequest) OnboardingCheck {
	out := OnboardingCheck{TrustDomain: cp.ca.TrustDomain(), SecureAddr: cp.SecureAddr(), Problems: []OnboardingProblem{}}
	out.DiscoveryAddress, out.ProxyMetadata = cp.proxyDefaults()
	add := func(flag, fix, format string, args ...any) {
		out.Problems = append(out.Problems, OnboardingProblem{Flag: flag, Message: fmt.Sprintf(format, args...), Fix: fix})
	}
	if req.TrustDomain != "" && req.TrustDomain != out.TrustDomain {
		add("--trust-domain", fmt.Sprintf("drop --trust-domain, or pass --trust-domain %s", out.TrustDomain),
			"trust domain %q is not the CA's (%q): the CA would refuse the token", req.TrustDomain, out.TrustDomain)
	}
	if req.WorkloadGroup != "" {
		cp.checkGroup(req, add)
	}
	if req.DiscoveryAddress != "" {
		cp.checkDiscovery(req.DiscoveryAddress, add)
	}
	return out
}

func (cp *ControlPlane) checkGroup(req OnboardingRequest, add func(flag, fix, format string, args ...any)) {
	snap := cp.store.Snapshot()
	key := store.Key{Kind: store.KindWorkloadGroup, Namespace: req.Namespace, Name: req.WorkloadGroup}
	o := snap.Get(key)
	if o == nil {
		var names []string
		for _, g := range snap.List(store.KindWorkloadGroup) {
			if g.Namespace == req.Namespace {
				names = append(names, g.Name)
			}
		}
		fix := fmt.Sprintf("add a WorkloadGroup named %s in namespace %s to the config", req.WorkloadGroup, req.Namespace)
		if len(names) > 0 {
			fix += ", or pass one that exists: " + strings.Join(names, ", ")
		}
		add("--workload-group", fix, "WorkloadGroup %s/%s is not in the control plane's config", req.Namespace, req.WorkloadGroup)
		return
	}
	wg := o.Spec.(*networking.WorkloadGroup)
	if sa := wg.GetTemplate().GetServiceAccount(); sa != "" && sa != req.ServiceAccount {
		add("--service-account", "pass --service-account "+sa,
			"WorkloadGroup %s/%s registers service account %q, not %q: the registration would be refused", req.Namespace, req.WorkloadGroup, sa, req.ServiceAccount)
	}
	labels := wg.GetMetadata().GetLabels()
	for _, se := range snap.List(store.KindServiceEntry) {
		sel := se.Spec.(*networking.ServiceEntry).GetWorkloadSelector().GetLabels()
		if se.Namespace == req.Namespace && len(sel) > 0 && model.LabelsMatch(sel, labels) {
			return
		}
	}
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+": "+labels[k])
	}
	add("--workload-group", fmt.Sprintf("add a ServiceEntry in namespace %s with workloadSelector: {labels: {%s}}", req.Namespace, strings.Join(pairs, ", ")),
		"no ServiceEntry in namespace %s selects WorkloadGroup %s's labels {%s}: the VM would register but no host would route to it",
		req.Namespace, req.WorkloadGroup, strings.Join(pairs, ", "))
}

func (cp *ControlPlane) checkDiscovery(addr string, add func(flag, fix, format string, args ...any)) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		add("--discovery-address", "pass HOST:PORT of the secure port", "%q is not host:port: %v", addr, err)
		return
	}
	_, securePort, _ := net.SplitHostPort(cp.SecureAddr())
	if _, xdsPort, _ := net.SplitHostPort(cp.XDSAddr()); port == xdsPort && port != securePort {
		add("--discovery-address", fmt.Sprintf("pass --discovery-address %s", net.JoinHostPort(host, securePort)),
			"port %s is the plaintext xDS port; the agent needs the secure port (%s)", port, securePort)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		if lh, _, _ := net.SplitHostPort(cp.SecureAddr()); net.ParseIP(lh) != nil && net.ParseIP(lh).IsLoopback() {
			add("--discovery-address", "set secureAddr: 0.0.0.0:"+securePort+" (or this host's address) in vmesh.yaml and restart vmesh serve",
				"the secure port listens on %s only: a VM dialling %s cannot reach it", cp.SecureAddr(), addr)
		}
	}
	cert, err := cp.secureTLS.GetCertificate(&tls.ClientHelloInfo{ServerName: host})
	if err != nil {
		add("--discovery-address", "see the control plane's log", "the secure port has no certificate: %v", err)
		return
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			add("--discovery-address", "see the control plane's log", "the secure port's certificate: %v", err)
			return
		}
	}
	if err := leaf.VerifyHostname(host); err != nil {
		names := append([]string{}, leaf.DNSNames...)
		for _, ip := range leaf.IPAddresses {
			names = append(names, ip.String())
		}
		add("--discovery-address",
			fmt.Sprintf("add %s to secureHosts in vmesh.yaml (or --secure-host) and restart vmesh serve, or dial one of its names", host),
			"the secure port's certificate does not name %q (it names %s): the agent would fail TLS verification", host, strings.Join(names, ", "))
	}
}

func (cp *ControlPlane) onboardingHandler(w http.ResponseWriter, r *http.Request) {
	if !cp.Ready() {
		http.Error(w, "config not loaded yet: the WorkloadGroups cannot be checked", http.StatusServiceUnavailable)
		return
	}
	q := r.URL.Query()
	req := OnboardingRequest{
		Namespace: q.Get("namespace"), ServiceAccount: q.Get("serviceAccount"), WorkloadGroup: q.Get("workloadGroup"),
		DiscoveryAddress: q.Get("discoveryAddress"), TrustDomain: q.Get("trustDomain"),
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(cp.CheckOnboarding(req))
}
