// Package credentials warns about the file credentials a proxy's config
// names and its agent does not hold. A vmesh agent reports, on each of its
// Envoy's xDS streams, the credential secrets its credentials directory
// serves over SDS (xds.CredentialsType); the Checker compares them with
// what the proxy's config asks for (a Gateway server's or a
// DestinationRule's credentialName, as the proxy kind's generators list
// them) and puts a warning VM1019 on each object and field naming one the
// agent lacks, with the proxies that lack it (the source "credentials":
// /debug/config, the warnings metric, the console), and lists each
// proxy's missing credentials (/debug/credentials, vmesh status). Envoy
// gets no secret for such a name: the listener's filter chain or the
// cluster that needs it fails closed. A proxy whose agent sent no report
// (an Envoy without a vmesh agent) is not checked.
package credentials

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/vmesh/vmesh/internal/filecert"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
)

// Source is the Store source whose status carries the warnings.
var Source = store.Source{Name: "credentials", Class: store.ClassRegistration}

// Needs lists the credentials a proxy's config asks for (xds.Credentials).
type Needs func(*model.Snapshot, model.Workload) []model.CredentialUse

// Missing is one credential a proxy's config asks for and its agent does
// not hold.
type Missing struct {
	// Secret is the secret's plain name ("<credentialName>" or
	// "<credentialName>-cacert"), Credential the credentialName.
	Secret     string `json:"secret"`
	Credential string `json:"credential"`
	// Object ("Kind/namespace/name") and Field name it; File and Line
	// are where the object is written.
	Object string `json:"object"`
	Field  string `json:"field"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	// Reason is why the agent refused certificate files ("" for a
	// credential its directory does not hold).
	Reason string `json:"reason,omitempty"`
}

// String renders m as status and logs show it.
func (m Missing) String() string {
	at := m.Object + " " + m.Field
	if m.File != "" {
		at = fmt.Sprintf("%s:%d: %s", m.File, m.Line, at)
	}
	if m.Reason != "" {
		return fmt.Sprintf("%s (%s): %s", m.Secret, at, m.Reason)
	}
	return fmt.Sprintf("%s (%s)", m.Secret, at)
}

// Proxy is one proxy's missing credentials, as /debug/credentials lists
// them.
type Proxy struct {
	ID string `json:"id"`
	// Held are the secrets its agent reported.
	Held    []string  `json:"held"`
	Missing []Missing `json:"missing,omitempty"`
}

// report is a stream's last credential report.
type report struct {
	w    model.Workload
	held map[string]bool
	// refused are the certificate file names the agent refuses, with why
	// (filecert.RefusedPrefix).
	refused map[string]string
}

// Checker keeps the warnings from the agents' reports and the model's
// snapshots. Feed it with Report, Closed and Snapshot; Run does the
// checking.
type Checker struct {
	st    *store.Store
	needs Needs
	log   *slog.Logger
	dirty chan struct{}

	mu      sync.Mutex
	snap    *model.Snapshot
	reports map[int64]report
	proxies []Proxy
	last    []store.ConfigError
}

// New returns a Checker writing its warnings to st.
func New(st *store.Store, needs Needs, logger *slog.Logger) *Checker {
	if logger == nil {
		logger = slog.Default()
	}
	return &Checker{st: st, needs: needs, log: logger.With("component", "credentials"), dirty: make(chan struct{}, 1), reports: map[int64]report{}}
}

// Report records the secrets held by the agent of the proxy w on stream,
// replacing the stream's last report.
func (c *Checker) Report(stream int64, w model.Workload, held []string) {
	r := report{w: w, held: map[string]bool{}, refused: map[string]string{}}
	for _, h := range held {
		if name, why, ok := filecert.Refused(h); ok {
			r.refused[name] = why
			continue
		}
		r.held[h] = true
	}
	c.mu.Lock()
	c.reports[stream] = r
	c.mu.Unlock()
	c.wake()
}

// Closed forgets stream's report.
func (c *Checker) Closed(stream int64) {
	c.mu.Lock()
	_, ok := c.reports[stream]
	delete(c.reports, stream)
	c.mu.Unlock()
	if ok {
		c.wake()
	}
}

// Snapshot records the model snapshot proxies are served from.
func (c *Checker) Snapshot(s *model.Snapshot) {
	c.mu.Lock()
	c.snap = s
	c.mu.Unlock()
	c.wake()
}

func (c *Checker) wake() {
	select {
	case c.dirty <- struct{}{}:
	default:
	}
}

// Run checks after every change until ctx is done.
func (c *Checker) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.dirty:
			c.check()
		}
	}
}

// Proxies returns every reporting proxy that misses a credential, by id.
func (c *Checker) Proxies() []Proxy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.proxies)
}

// ServeHTTP serves /debug/credentials: Proxies as JSON.
func (c *Checker) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(c.Proxies())
}

// check computes every reporting proxy's missing credentials and the
// warnings, and publishes the warnings when they changed.
func (c *Checker) check() {
	c.mu.Lock()
	snap := c.snap
	reports := maps.Clone(c.reports)
	c.mu.Unlock()
	if snap == nil {
		return
	}
	objects := c.st.Snapshot()
	// Proxies of one group ask for the same credentials: computed once
	// per group.
	byKey := map[string][]model.CredentialUse{}
	lacking := map[model.CredentialUse][]string{} // use -> proxy ids
	held := map[string][]string{}
	missing := map[string]map[model.CredentialUse]bool{}
	reasons := map[model.CredentialUse]map[string]string{} // certificate files: proxy id -> why refused
	for _, r := range reports {
		key := model.ViewKey(snap, r.w)
		uses, ok := byKey[key]
		if !ok {
			uses = c.needs(snap, r.w)
			byKey[key] = uses
		}
		held[r.w.ID] = slices.Sorted(maps.Keys(r.held))
		for _, u := range uses {
			if r.held[u.Secret] || missing[r.w.ID][u] {
				continue
			}
			if filecert.IsName(u.Secret) {
				// Certificate files: missing once the agent refused them
				// (its Envoy asks for them when the listener arrives; not
				// asked yet is not missing).
				why, refused := r.refused[u.Secret]
				if !refused {
					continue
				}
				if reasons[u] == nil {
					reasons[u] = map[string]string{}
				}
				reasons[u][r.w.ID] = why
			}
			if missing[r.w.ID] == nil {
				missing[r.w.ID] = map[model.CredentialUse]bool{}
			}
			missing[r.w.ID][u] = true
			lacking[u] = append(lacking[u], r.w.ID)
		}
	}
	where := func(k store.Key) (file string, line int, commit, source string) {
		if o := objects.Get(k); o != nil {
			return o.Origin.File, o.Origin.Line, o.Origin.Commit, o.Origin.Source
		}
		return "", 0, "", ""
	}
	var proxies []Proxy
	for id, ms := range missing {
		p := Proxy{ID: id, Held: held[id]}
		for u := range ms {
			file, line, _, _ := where(u.Object)
			p.Missing = append(p.Missing, Missing{Secret: u.Secret, Credential: u.Credential, Object: u.Object.String(), Field: u.Field, File: file, Line: line, Reason: reasons[u][id]})
		}
		slices.SortFunc(p.Missing, func(a, b Missing) int {
			return cmp.Or(cmp.Compare(a.Object, b.Object), cmp.Compare(a.Field, b.Field), cmp.Compare(a.Secret, b.Secret))
		})
		proxies = append(proxies, p)
	}
	slices.SortFunc(proxies, func(a, b Proxy) int { return cmp.Compare(a.ID, b.ID) })
	var warnings []store.ConfigError
	for u, ids := range lacking {
		slices.Sort(ids)
		ids = slices.Compact(ids)
		what, fails := "its certificate and key (tls.crt, tls.key)", "the listener's filter chain of this server"
		if strings.HasSuffix(u.Secret, model.CACertSuffix) {
			what = "its roots (ca.crt)"
		}
		if u.Object.Kind == store.KindDestinationRule {
			fails = "the cluster"
		}
		msg := fmt.Sprintf("credential %q: %s not in the credentials directory of the agent of %s (secret %s): %s fails closed there; put the files in <credentials dir>/%s on the VM",
			u.Credential, what, proxyList(ids), u.Secret, fails, u.Credential)
		if filecert.IsName(u.Secret) {
			msg = fmt.Sprintf("certificate files %s: refused by the agent of %s (%s): %s fails closed there; put the files in a directory the agent allows (vmesh agent --cert-file-dirs)",
				u.Secret, proxyList(ids), reasons[u][ids[0]], fails)
		}
		w := store.ConfigError{Object: u.Object.String(), Field: u.Field, Severity: store.SeverityWarning, Code: store.CodeCredentialNotHeld, Message: msg}
		w.File, w.Line, w.Commit, w.Source = where(u.Object)
		warnings = append(warnings, w)
	}
	slices.SortFunc(warnings, func(a, b store.ConfigError) int {
		return cmp.Or(cmp.Compare(a.Object, b.Object), cmp.Compare(a.Field, b.Field), cmp.Compare(a.Message, b.Message))
	})
	c.mu.Lock()
	c.proxies = proxies
	changed := !slices.Equal(warnings, c.last)
	c.last = warnings
	c.mu.Unlock()
	if changed {
		for _, w := range warnings {
			c.log.Warn("credential not held by the proxies' agents", "warning", w.Error())
		}
		if len(warnings) == 0 {
			c.log.Info("every credential the proxies' config names is held by their agents")
		}
		c.st.SetStatus(Source, "", warnings)
	}
}

// proxyList names the proxies, at most three.
func proxyList(ids []string) string {
	if len(ids) == 1 {
		return "proxy " + ids[0]
	}
	if len(ids) <= 3 {
		return fmt.Sprintf("%d proxies: %s", len(ids), strings.Join(ids, ", "))
	}
	return fmt.Sprintf("%d proxies: %s and %d more", len(ids), strings.Join(ids[:3], ", "), len(ids)-3)
}
