package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/vmesh/vmesh/agents/sds"
	"github.com/vmesh/vmesh/xds/nds"
)

// StatusAddr returns the address of the agent's HTTP port once it listens
// ("" without one).
func (a *Agent) StatusAddr() string {
	if p := a.statusAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// Readiness returns nil when the VM is ready, as pilot-agent's
// /healthz/ready: the certificate is valid, the agent's xDS stream is
// connected, and the readiness probe (if any) passes. Otherwise the error
// says what is missing.
func (a *Agent) Readiness() error {
	ps := a.parts.Load()
	if ps == nil {
		return errors.New("agent starting")
	}
	var why []string
	kp := ps.certs.Current()
	switch {
	case kp == nil:
		why = append(why, "no certificate yet")
	case time.Now().After(kp.Leaf.NotAfter):
		why = append(why, "certificate expired at "+kp.Leaf.NotAfter.UTC().Format(time.RFC3339))
	case time.Now().Before(kp.Leaf.NotBefore):
		why = append(why, "certificate not valid before "+kp.Leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if !ps.proxy.Connected() {
		why = append(why, "xDS stream to the control plane not connected")
	}
	if ps.prober.HasProbe() {
		switch last := ps.prober.Last(); {
		case last == nil:
			why = append(why, "readiness probe has not passed yet")
		case !last.Healthy:
			why = append(why, "readiness probe failing: "+last.Message)
		}
	}
	if len(why) > 0 {
		return errors.New(strings.Join(why, "; "))
	}
	return nil
}

// gatherer returns what /stats/prometheus serves: the registerer the agent
// was built with when it can be gathered.
func (a *Agent) gatherer() prometheus.Gatherer {
	if g, ok := a.reg.(prometheus.Gatherer); ok {
		return g
	}
	return prometheus.NewRegistry()
}

// serveStatus serves the agent's HTTP port on lis until ctx is done.
func (a *Agent) serveStatus(ctx context.Context, lis net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz/ready", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Readiness(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("/stats/prometheus", a.serveStats)
	mux.HandleFunc("/debug/ndsz", a.serveNameTable)
	mux.HandleFunc("/debug/credentials", a.serveCredentials)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	a.log.Info("agent status port serving", "listen", lis.Addr().String())
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("agent: status port: %w", err)
	}
}

// serveStats writes the agent's metrics in the Prometheus text format,
// followed by Envoy's own (its admin /stats/prometheus) when the agent
// runs Envoy, as pilot-agent merges them.
func (a *Agent) serveStats(w http.ResponseWriter, r *http.Request) {
	mfs, err := a.gatherer().Gather()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	w.Header().Set("Content-Type", string(format))
	enc := expfmt.NewEncoder(w, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return
		}
	}
	if ps := a.parts.Load(); ps != nil && ps.envoy {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		url := fmt.Sprintf("http://127.0.0.1:%d/stats/prometheus", a.adminPort())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintf(w, "# Envoy's stats unavailable: %v\n", strings.ReplaceAll(err.Error(), "\n", " "))
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(w, resp.Body)
	}
}

// CredentialsDump is /debug/credentials: the file credentials the agent
// serves to Envoy over SDS (never their keys), the credential names Envoy
// asked for, and those of them no folder holds; the directories it may
// read certificate files from and each certificate file name Envoy asked
// for, served or refused with why.
type CredentialsDump struct {
	Dir          string                `json:"dir"`
	Credentials  []sds.CredentialState `json:"credentials"`
	Requested    []string              `json:"requested"`
	Missing      []string              `json:"missing"`
	CertFileDirs []string              `json:"certFileDirs"`
	Files        []sds.FileState       `json:"files"`
}

func (a *Agent) serveCredentials(w http.ResponseWriter, _ *http.Request) {
	d := CredentialsDump{Dir: a.cfg.CredentialsDir, Credentials: []sds.CredentialState{}, Requested: []string{}, Missing: []string{},
		CertFileDirs: append([]string{}, a.cfg.CertFileDirs...), Files: []sds.FileState{}}
	if ps := a.parts.Load(); ps != nil && ps.secrets != nil {
		states, missing := ps.secrets.Credentials()
		d.Credentials = append(d.Credentials, states...)
		d.Missing = append(d.Missing, missing...)
		d.Requested = append(d.Requested, ps.secrets.Requested()...)
		d.Files = append(d.Files, ps.secrets.Files()...)
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(d)
}

// NameTableDump is /debug/ndsz: the name table the DNS proxy answers from
// and every name it answers, with the host each stands for.
type NameTableDump struct {
	Table     nds.Table         `json:"table"`
	Names     map[string]string `json:"names"`
	Upstreams []string          `json:"upstreams"`
	Search    []string          `json:"search"`
}

func (a *Agent) serveNameTable(w http.ResponseWriter, _ *http.Request) {
	ps := a.parts.Load()
	if ps == nil || ps.dns == nil {
		http.Error(w, "the DNS proxy is not running", http.StatusNotFound)
		return
	}
	d := NameTableDump{Table: ps.dns.Table(), Names: ps.dns.Names(), Upstreams: ps.dns.Upstreams(), Search: ps.dns.Search()}
	if d.Upstreams == nil {
		d.Upstreams = []string{}
	}
	slices.Sort(d.Search)
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(d)
}
