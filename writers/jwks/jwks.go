// Package jwks fetches the JSON Web Key Sets that RequestAuthentications
// name by jwksUri (or by issuer, through OpenID discovery), as istiod does
// by default (PILOT_JWT_ENABLE_REMOTE_JWKS=false): the control plane
// fetches each key set with a timeout, keeps it, refreshes it, and the JWT
// filter carries it inline (local_jwks). The Fetcher is a Store source: it
// writes one store.KindJWKS object per key set, so a change of keys is a
// Store change like any other and reaches the proxies through the model.
//
// Fetching is bounded, since whoever may write a RequestAuthentication
// chooses the URI: the fetcher connects only to globally reachable
// addresses unless the operator allows a range (Settings.AllowedCIDRs),
// never to one in Settings.BlockedCIDRs, checked on every address it
// resolves and dials, for every redirect (at most MaxRedirects), through
// no proxy; a body is at most Settings.MaxBytes. Only a valid JSON Web Key
// Set is accepted, and only its public signature keys, re-serialised
// (PublicKeySet), are stored: nothing else a key server answers reaches
// the Store, the proxies or the debug pages.
//
// A key set that cannot be fetched or is refused is reported (warning
// VM1012 in the source's status, at the RequestAuthentication's file,
// line and field) and its object carries the error and no keys: the JWT
// filter then gets a key set no token verifies against, so requests that
// carry such a token are rejected (fail closed, as Istio). A refresh that
// fails keeps the keys last fetched, as Istio's cache does.
package jwks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"
)

// SourceName names the Store source the Fetcher writes as (its status
// holds the fetch warnings).
const SourceName = "jwks"

// Source is the Store source the Fetcher writes as: generated objects,
// ranked as a registry's.
func Source() store.Source {
	return store.Source{Name: SourceName, Class: store.ClassRegistry}
}

// Settings tune the Fetcher.
type Settings struct {
	// Timeout bounds one fetch when the JWT rule sets no timeout; Istio's
	// default is 5 s.
	Timeout time.Duration
	// Refresh is how often a fetched key set is fetched again; Istio's
	// default (PILOT_JWT_PUB_KEY_REFRESH_INTERVAL) is 20 min.
	Refresh time.Duration
	// RetryAfterFailure is how long after a failed fetch it is tried
	// again; Istio's is 1 min.
	RetryAfterFailure time.Duration
	// MaxBytes bounds a response body; default 1 MiB.
	MaxBytes int64
	// Client does the requests; nil: an http.Client with the system's
	// roots. Tests give one that trusts their CA.
	Client *http.Client
	// AllowedCIDRs are the address ranges that are not globally reachable
	// (loopback, link-local, private, CGNAT, ...) key sets may still be
	// fetched from, e.g. an identity provider on the internal network.
	// Without them, a jwksUri, issuer or redirect whose host resolves to
	// such an address fails the fetch (so the key set fails closed):
	// whoever may write a RequestAuthentication cannot make the control
	// plane fetch from a cloud metadata endpoint or an admin port.
	// Unspecified, multicast and broadcast addresses are never allowed.
	AllowedCIDRs []netip.Prefix
	// BlockedCIDRs are address ranges key sets are never fetched from,
	// even where AllowedCIDRs or global reachability would allow them, as
	// with istiod's BLOCKED_CIDRS_IN_JWKS_URIS.
	BlockedCIDRs []netip.Prefix
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// After are the config sources' ready channels: the first fetch waits
	// for them, so that Synced means "the key sets of the first complete
	// config were fetched (or failed)".
	After []<-chan struct{}
}

// DefaultSettings are Istio's: 5 s timeout, 20 min refresh, 1 min retry.
func DefaultSettings() Settings {
	return Settings{Timeout: 5 * time.Second, Refresh: 20 * time.Minute, RetryAfterFailure: time.Minute, MaxBytes: 1 << 20}
}

func (s Settings) withDefaults() Settings {
	d := DefaultSettings()
	if s.Timeout <= 0 {
		s.Timeout = d.Timeout
	}
	if s.Refresh <= 0 {
		s.Refresh = d.Refresh
	}
	if s.RetryAfterFailure <= 0 {
		s.RetryAfterFailure = d.RetryAfterFailure
	}
	if s.MaxBytes <= 0 {
		s.MaxBytes = d.MaxBytes
	}
	if s.Client == nil {
		s.Client = &http.Client{}
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	return s
}

// Fetcher keeps the Store's KindJWKS objects equal to the key sets of the
// Store's RequestAuthentications. Run drives it.
type Fetcher struct {
	store    *store.Store
	settings Settings
	entries  map[string]*entry // by model.JWKSKey; only Run's goroutine touches it
	// published: the source has written to the Store (a config without
	// RequestAuthentications never shows the source).
	published bool
	synced    chan struct{}
}

// entry is one key set: what was last fetched and when to fetch again.
type entry struct {
	rule    *security.JWTRule
	users   []user   // the RequestAuthentication rules that name it, for warnings
	keys    string   // last good key set: its public keys, re-serialised
	notes   []string // the keys the last good fetch refused
	fetched time.Time
	err     error // the last fetch's error; nil after a success
	due     time.Time
	object  *store.Object
}

type user struct {
	object string // kind/namespace/name
	field  string
	origin store.Origin
}

// New returns a Fetcher writing to store.
func New(store *store.Store, s Settings) (*Fetcher, error) {
	if store == nil {
		return nil, errors.New("jwks: nil store")
	}
	s = s.withDefaults()
	s.AllowedCIDRs, s.BlockedCIDRs = normalise(s.AllowedCIDRs), normalise(s.BlockedCIDRs)
	c, err := guardedClient(s.Client, policy{allowed: s.AllowedCIDRs, blocked: s.BlockedCIDRs})
	if err != nil {
		return nil, err
	}
	s.Client = c
	return &Fetcher{store: store, settings: s, entries: map[string]*entry{}, synced: make(chan struct{})}, nil
}

// Synced is closed once the key sets of the first complete config (after
// Settings.After) have been fetched or have failed: a server that starts
// xDS after it serves no proxy the fail-closed key set of a fetch that had
// not been tried yet. Istio fetches during the push for the same reason.
func (f *Fetcher) Synced() <-chan struct{} { return f.synced }

// Run fetches the key sets the Store's RequestAuthentications need, then
// follows the Store's changes and refreshes them, until ctx ends.
func (f *Fetcher) Run(ctx context.Context) error {
	sub := f.store.Subscribe()
	defer sub.Close()
	sub.Take()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for _, c := range f.settings.After {
		select {
		case <-c:
		case <-ctx.Done():
			return nil
		}
	}
	sub.Take()
	f.sync(ctx, time.Now())
	close(f.synced)
	for {
		f.resetTimer(timer)
		select {
		case <-ctx.Done():
			return nil
		case <-sub.C():
			ch := sub.Take()
			if onlyJWKS(ch) {
				continue
			}
		case <-timer.C:
		}
		f.sync(ctx, time.Now())
	}
}

func onlyJWKS(ch store.Changes) bool {
	for k := range ch.Keys {
		if k.Kind != store.KindJWKS {
			return false
		}
	}
	return len(ch.Keys) > 0
}

func (f *Fetcher) resetTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	var next time.Time
	for _, e := range f.entries {
		if next.IsZero() || e.due.Before(next) {
			next = e.due
		}
	}
	if next.IsZero() {
		return
	}
	t.Reset(max(time.Until(next), 0))
}

// sync brings the entries in line with the Store's RequestAuthentications,
// fetches those due, and writes the objects and the status.
func (f *Fetcher) sync(ctx context.Context, now time.Time) {
	want := sources(f.store.Snapshot())
	for k := range f.entries {
		if _, ok := want[k]; !ok {
			delete(f.entries, k)
		}
	}
	var due []string
	for k, w := range want {
		e := f.entries[k]
		if e == nil {
			e = &entry{}
			f.entries[k] = e
		}
		e.rule, e.users = w.rule, w.users
		if !e.due.After(now) {
			due = append(due, k)
		}
	}
	slices.Sort(due)
	type result struct {
		keys  string
		notes []string
		err   error
	}
	results := make([]result, len(due))
	var wg sync.WaitGroup
	for i, k := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys, notes, err := f.fetch(ctx, k, f.entries[k].rule)
			results[i] = result{keys, notes, err}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for i, k := range due {
		e, r := f.entries[k], results[i]
		e.err = r.err
		if r.err == nil {
			if r.keys != e.keys {
				f.settings.Logger.Info("JWKS fetched", "key", k, "bytes", len(r.keys))
			}
			e.keys, e.notes, e.fetched = r.keys, r.notes, now
			e.due = now.Add(f.settings.Refresh)
		} else {
			f.settings.Logger.Warn("JWKS fetch failed", "key", k, "error", r.err, "serving_last_good", e.keys != "")
			e.due = now.Add(f.settings.RetryAfterFailure)
		}
	}
	f.publish()
}

// publish writes one object per entry (the same pointer while its content
// is unchanged, so the Store sees no change) and the warnings.
func (f *Fetcher) publish() {
	if len(f.entries) == 0 && !f.published {
		return
	}
	f.published = true
	var objects []*store.Object
	var warnings []store.ConfigError
	for _, k := range slices.Sorted(maps.Keys(f.entries)) {
		e := f.entries[k]
		var ann map[string]string
		if e.keys == "" && e.err != nil {
			ann = map[string]string{store.JWKSErrorAnnotation: e.err.Error()}
		}
		if e.object == nil || e.object.Spec.(*wrapperspb.StringValue).GetValue() != e.keys || !maps.Equal(e.object.Annotations, ann) {
			e.object = &store.Object{
				Key:         store.Key{Kind: store.KindJWKS, Name: k},
				APIVersion:  "vmesh.io/v1",
				Annotations: ann,
				Spec:        wrapperspb.String(e.keys),
				Origin:      store.Origin{Source: SourceName, Registry: k},
			}
		}
		objects = append(objects, e.object)
		if broad := f.broadAllowed(); len(broad) > 0 {
			for _, u := range e.users {
				warnings = append(warnings, store.ConfigError{
					File: u.origin.File, Line: u.origin.Line, Commit: u.origin.Commit, Object: u.object, Field: u.field,
					Severity: store.SeverityWarning, Code: store.CodeJWKSFetchUnrestricted, Source: u.origin.Source,
					Message: fmt.Sprintf("JWKS %s may be fetched from any address in %s (jwksAllowedCIDRs, --jwks-allowed-cidr): whoever may write a RequestAuthentication can make the control plane fetch from the hosts of those ranges; allow only the key servers' own addresses", k, strings.Join(broad, ", ")),
				})
			}
		}
		if e.err == nil && len(e.notes) > 0 {
			for _, u := range e.users {
				warnings = append(warnings, store.ConfigError{
					File: u.origin.File, Line: u.origin.Line, Commit: u.origin.Commit, Object: u.object, Field: u.field,
					Severity: store.SeverityWarning, Code: store.CodeJWKSFetchFailed, Source: u.origin.Source,
					Message: fmt.Sprintf("JWKS %s: %s: tokens signed with those keys are rejected; the other keys serve", k, strings.Join(e.notes, "; ")),
				})
			}
		}
		if e.err == nil {
			continue
		}
		effect := "requests carrying its tokens are rejected (fail closed) until a fetch succeeds"
		if e.keys != "" {
			effect = fmt.Sprintf("the keys fetched at %s keep serving", e.fetched.UTC().Format(time.RFC3339))
		}
		for _, u := range e.users {
			warnings = append(warnings, store.ConfigError{
				File: u.origin.File, Line: u.origin.Line, Commit: u.origin.Commit, Object: u.object, Field: u.field,
				Severity: store.SeverityWarning, Code: store.CodeJWKSFetchFailed, Source: u.origin.Source,
				Message: fmt.Sprintf("JWKS %s: %v: %s", k, e.err, effect),
			})
		}
	}
	// One Store step: a reader that sees a key set's new value (or its
	// error) also sees the warnings about it, and no snapshot holds a
	// warning about a key set it does not hold yet.
	if err := f.store.ReplaceWithStatus(Source(), objects, store.StatusChange{Problems: warnings}); err != nil {
		f.settings.Logger.Error("JWKS objects not stored", "error", err)
	}
}

// broadAllowed returns the allowed ranges wider than one address.
func (f *Fetcher) broadAllowed() []string {
	var out []string
	for _, p := range f.settings.AllowedCIDRs {
		if p.Bits() < p.Addr().BitLen() {
			out = append(out, p.String())
		}
	}
	return out
}

type want struct {
	rule  *security.JWTRule
	users []user
}

// sources are the key sets the Store's RequestAuthentications need, by
// model.JWKSKey: rules without an inline jwks (of several rules with one
// key, the longest timeout wins).
func sources(fs *store.Snapshot) map[string]*want {
	out := map[string]*want{}
	for _, o := range fs.List(store.KindRequestAuthentication) {
		ra, ok := o.Spec.(*security.RequestAuthentication)
		if !ok || len(ra.GetTargetRefs()) > 0 || ra.GetTargetRef() != nil {
			continue
		}
		for i, r := range ra.GetJwtRules() {
			if r == nil || r.GetJwks() != "" {
				continue
			}
			k := model.JWKSKey(r)
			field := fmt.Sprintf("jwtRules[%d].jwksUri", i)
			if r.GetJwksUri() == "" {
				field = fmt.Sprintf("jwtRules[%d].issuer", i)
			}
			w := out[k]
			if w == nil {
				w = &want{rule: r}
				out[k] = w
			} else if r.GetTimeout().AsDuration() > w.rule.GetTimeout().AsDuration() {
				w.rule = r
			}
			w.users = append(w.users, user{object: o.Key.String(), field: field, origin: o.Origin})
		}
	}
	return out
}

// fetch gets one key set: the rule's jwksUri, or the jwks_uri of its
// issuer's OpenID configuration, within the rule's timeout (else the
// default). The answer must be a JSON Web Key Set with a public key: what
// is returned is its public keys, re-serialised, and notes on the keys it
// refused (PublicKeySet).
func (f *Fetcher) fetch(ctx context.Context, key string, r *security.JWTRule) (string, []string, error) {
	timeout := f.settings.Timeout
	if d := r.GetTimeout().AsDuration(); d > 0 {
		timeout = d
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	uri := r.GetJwksUri()
	if uri == "" {
		iss, _ := strings.CutPrefix(key, model.IssuerKeyPrefix)
		body, err := f.get(ctx, strings.TrimSuffix(iss, "/")+"/.well-known/openid-configuration")
		if err != nil {
			return "", nil, fmt.Errorf("OpenID discovery: %w", err)
		}
		var doc struct {
			JWKSURI string `json:"jwks_uri"`
		}
		if err := json.Unmarshal(body, &doc); err != nil || doc.JWKSURI == "" {
			return "", nil, fmt.Errorf("OpenID discovery of %s: no jwks_uri in the configuration", iss)
		}
		u, err := url.Parse(doc.JWKSURI)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(doc.JWKSURI) > maxURIBytes {
			return "", nil, fmt.Errorf("OpenID discovery of %s: jwks_uri is not an http or https URL", iss)
		}
		uri = doc.JWKSURI
	}
	body, err := f.get(ctx, uri)
	if err != nil {
		return "", nil, err
	}
	keys, notes, err := PublicKeySet(body)
	if err != nil {
		return "", nil, fmt.Errorf("%s: refused: %w", uri, err)
	}
	return keys, notes, nil
}

// maxURIBytes bounds a jwks_uri found by OpenID discovery.
const maxURIBytes = 2048

func (f *Fetcher) get(ctx context.Context, uri string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", uri, err)
	}
	resp, err := f.settings.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			if ue.URL != uri {
				return nil, fmt.Errorf("GET %s: redirected to %s: %w", uri, ue.URL, ue.Err)
			}
			return nil, fmt.Errorf("GET %s: %w", uri, ue.Err)
		}
		return nil, fmt.Errorf("GET %s: %w", uri, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", uri, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.settings.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", uri, err)
	}
	if int64(len(body)) > f.settings.MaxBytes {
		return nil, fmt.Errorf("GET %s: body larger than %d bytes", uri, f.settings.MaxBytes)
	}
	return body, nil
}
