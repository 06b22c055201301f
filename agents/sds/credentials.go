package sds

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/fsnotify/fsnotify"

	"github.com/vmesh/vmesh/internal/filecert"
	"github.com/vmesh/vmesh/internal/settle"
)

// File credentials: what Istio keeps in Kubernetes secrets and names with
// credentialName (Gateway servers, DestinationRules), a VM keeps in a
// directory, one folder per credential:
//
//	<dir>/<name>/tls.crt   certificate chain, leaf first (or "cert")
//	<dir>/<name>/tls.key   its private key (or "key")
//	<dir>/<name>/ca.crt    roots to verify the peer with (or "cacert")
//	<dir>/<name>/ca.crl    revoked peer certificates (or "crl"), PEM CRLs
//	                       each signed by a certificate of ca.crt
//
// The agent serves them to its Envoy over SDS under Istio's secret names:
// the pair as "<name>" and "kubernetes://<name>", the roots as
// "<name>-cacert" and "kubernetes://<name>-cacert", with the CRL as that
// validation context's crl, as Istio's credentialName secrets carry
// ca.crl (Envoy then refuses a peer certificate the CRL lists, and, as
// for any CRL, a chain whose issuers have no CRL). The private key stays on
// the VM: it never travels over xDS. Files are re-read when they change (a
// Kubernetes-style "..data" symlink swap included); a credential that
// becomes invalid keeps its last good version, one that is removed is
// withdrawn, and a name Envoy asks for that the directory does not hold is
// counted as missing (vmesh_sds_credentials{state="missing"}): Envoy then
// brings the listener or cluster up without it, which fails closed.
const (
	// KubernetesPrefix is the prefix Istio puts before a credentialName in
	// SDS resource names.
	KubernetesPrefix = "kubernetes://"
	// CACertSuffix names a credential's roots.
	CACertSuffix = "-cacert"
)

// credentialName is a credential folder name: Kubernetes' secret names.
var credentialName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// credential is one folder's parsed contents.
type credential struct {
	chain, key, roots, crl []byte
}

// readCredential reads and checks the folder dir/name.
func readCredential(dir, name string) (credential, error) {
	var c credential
	read := func(names ...string) ([]byte, string, error) {
		for _, n := range names {
			p := filepath.Join(dir, name, n)
			b, err := os.ReadFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, p, err
			}
			if err := ownedSafely(p); err != nil {
				return nil, p, err
			}
			return b, p, nil
		}
		return nil, "", nil
	}
	chain, chainPath, err := read("tls.crt", "cert")
	if err != nil {
		return c, err
	}
	key, keyPath, err := read("tls.key", "key")
	if err != nil {
		return c, err
	}
	roots, rootsPath, err := read("ca.crt", "cacert")
	if err != nil {
		return c, err
	}
	crl, crlPath, err := read("ca.crl", "crl")
	if err != nil {
		return c, err
	}
	switch {
	case chain == nil && key == nil && roots == nil:
		return c, errors.New("holds none of tls.crt, tls.key, ca.crt")
	case (chain == nil) != (key == nil):
		return c, fmt.Errorf("has %s without its pair (tls.crt and tls.key go together)", cmpOr(chainPath, keyPath))
	case crl != nil && roots == nil:
		return c, fmt.Errorf("has %s without ca.crt (a CRL revokes certificates of those roots)", crlPath)
	}
	if chain != nil {
		if _, err := tls.X509KeyPair(chain, key); err != nil {
			return c, fmt.Errorf("%s and %s: %w", chainPath, keyPath, err)
		}
	}
	if roots != nil && !x509.NewCertPool().AppendCertsFromPEM(roots) {
		return c, fmt.Errorf("%s: no PEM certificate", rootsPath)
	}
	if crl != nil {
		if err := checkCRL(crl, roots); err != nil {
			return c, fmt.Errorf("%s: %w", crlPath, err)
		}
	}
	return credential{chain: chain, key: key, roots: roots, crl: crl}, nil
}

// checkCRL checks that crlPEM holds PEM CRLs only (what Envoy reads), at
// least one, each signed by a certificate of rootsPEM: a CRL of another
// issuer would make Envoy refuse every peer of those roots.
func checkCRL(crlPEM, rootsPEM []byte) error {
	var issuers []*x509.Certificate
	for rest := rootsPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			issuers = append(issuers, c)
		}
	}
	n := 0
	for rest := crlPEM; len(bytes.TrimSpace(rest)) > 0; n++ {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return errors.New("not PEM (Envoy reads a CRL in PEM)")
		}
		if b.Type != "X509 CRL" {
			return fmt.Errorf("PEM block %q, want X509 CRL", b.Type)
		}
		l, err := x509.ParseRevocationList(b.Bytes)
		if err != nil {
			return fmt.Errorf("CRL %d: %w", n, err)
		}
		if !slices.ContainsFunc(issuers, func(c *x509.Certificate) bool { return l.CheckSignatureFrom(c) == nil }) {
			return fmt.Errorf("CRL %d of %s is signed by no certificate of ca.crt", n, l.Issuer)
		}
	}
	if n == 0 {
		return errors.New("holds no CRL")
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ownedSafely refuses a file that another user could have written: a key
// or root planted by someone who can write the file is an identity.
func ownedSafely(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by group or others (mode %04o): refused", path, st.Mode().Perm())
	}
	return nil
}

// CredentialSecrets reads the credential folder dir/name (see File
// credentials) and returns the SDS secrets the agent serves it under, by
// name; an error says why the folder is refused.
func CredentialSecrets(dir, name string) (map[string]*tlsv3.Secret, error) {
	c, err := readCredential(dir, name)
	if err != nil {
		return nil, err
	}
	return secretsOf(name, c), nil
}

// secretsOf are the SDS resources of credential name.
func secretsOf(name string, c credential) map[string]*tlsv3.Secret {
	out := map[string]*tlsv3.Secret{}
	if c.chain != nil {
		for _, n := range []string{name, KubernetesPrefix + name} {
			out[n] = &tlsv3.Secret{Name: n, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
				CertificateChain: inlineBytes(c.chain),
				PrivateKey:       inlineBytes(c.key),
			}}}
		}
	}
	if c.roots != nil {
		for _, n := range []string{name + CACertSuffix, KubernetesPrefix + name + CACertSuffix} {
			vc := &tlsv3.CertificateValidationContext{TrustedCa: inlineBytes(c.roots)}
			if c.crl != nil {
				vc.Crl = inlineBytes(c.crl)
			}
			out[n] = &tlsv3.Secret{Name: n, Type: &tlsv3.Secret_ValidationContext{ValidationContext: vc}}
		}
	}
	return out
}

// CredentialState is one credential folder as the server last read it.
type CredentialState struct {
	// Name is the folder's name (the credentialName).
	Name string `json:"name"`
	// Secrets are the SDS resource names it is served under.
	Secrets []string `json:"secrets,omitempty"`
	// Error is why the folder's current contents are refused ("" when
	// they are served); a refused credential keeps its last good version.
	Error string `json:"error,omitempty"`
}

// loadCredentials reads dir and brings the served credentials in line with
// it: valid folders are (re)served, invalid ones keep their last good
// version, removed ones are withdrawn. It returns the state of each folder.
func (s *Server) loadCredentials(dir string) ([]CredentialState, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sds: credentials %s: %w", dir, err)
	}
	var states []CredentialState
	upsert := map[string]types.Resource{}
	next := map[string][]string{} // credential -> the secret names it is served under
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue // "..data" and its timestamped folders: reached through the links
		}
		st := CredentialState{Name: name}
		full := filepath.Join(dir, name)
		info, err := os.Stat(full) // follows a link to a folder
		switch {
		case err != nil:
			st.Error = err.Error()
		case !info.IsDir():
			continue
		case !credentialName.MatchString(name) || name == DefaultSecret || name == RootSecret:
			st.Error = fmt.Sprintf("%q is not a credential name (lower-case letters, digits, '-' and '.'; not %q or %q)", name, DefaultSecret, RootSecret)
		default:
			secrets, err := CredentialSecrets(dir, name)
			if err != nil {
				st.Error = err.Error()
				break
			}
			for n, r := range secrets {
				if err := r.ValidateAll(); err != nil {
					return nil, fmt.Errorf("sds: secret %s: %w", n, err)
				}
				upsert[n] = r
				st.Secrets = append(st.Secrets, n)
			}
			slices.Sort(st.Secrets)
			next[name] = st.Secrets
		}
		if st.Error != "" {
			if last, ok := s.creds.served[name]; ok {
				next[name] = last // the last good version keeps serving
				st.Secrets = last
				s.log.Warn("credential refused; its last good version keeps serving", "credential", name, "error", st.Error)
			} else {
				s.log.Warn("credential refused", "credential", name, "error", st.Error)
			}
		}
		states = append(states, st)
	}
	keep := map[string]bool{}
	for _, names := range next {
		for _, n := range names {
			keep[n] = true
		}
	}
	var remove []string
	for _, names := range s.creds.served {
		for _, n := range names {
			if !keep[n] {
				remove = append(remove, n)
			}
		}
	}
	s.creds.served = next
	if len(upsert) > 0 || len(remove) > 0 {
		if err := s.cache.UpdateResources(upsert, remove); err != nil {
			return states, fmt.Errorf("sds: %w", err)
		}
	}
	s.creds.mu.Lock()
	s.creds.states = states
	s.creds.names = keep
	s.creds.mu.Unlock()
	s.met.setCredentials(states, s.missingCredentials())
	s.report()
	return states, nil
}

// Held returns the credential secrets served, by their plain names (a
// credential's pair as "<name>", its roots as "<name>-cacert"; each is
// served under "kubernetes://" too), sorted.
func (s *Server) Held() []string {
	s.creds.mu.Lock()
	defer s.creds.mu.Unlock()
	out := []string{}
	for n := range s.creds.names {
		if !strings.HasPrefix(n, KubernetesPrefix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Credentials returns the state of each credential folder as last read,
// and the credential names Envoy asked for that no folder serves.
func (s *Server) Credentials() (states []CredentialState, missing []string) {
	s.creds.mu.Lock()
	defer s.creds.mu.Unlock()
	return slices.Clone(s.creds.states), s.missingLocked()
}

// Requested returns, sorted, the credential secret names Envoy has asked
// for (the mesh certificate and roots aside), served or not.
func (s *Server) Requested() []string {
	s.creds.mu.Lock()
	defer s.creds.mu.Unlock()
	out := make([]string, 0, len(s.creds.asked))
	for n := range s.creds.asked {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// requested records the secret names a stream asked for.
func (s *Server) requested(names []string) {
	s.askFiles(names)
	s.creds.mu.Lock()
	changed := false
	for _, n := range names {
		if n == DefaultSecret || n == RootSecret || n == "" || filecert.IsName(n) || s.creds.asked[n] {
			continue
		}
		s.creds.asked[n] = true
		changed = true
	}
	states := s.creds.states
	s.creds.mu.Unlock()
	if changed {
		missing := s.missingCredentials()
		if len(missing) > 0 {
			s.log.Warn("Envoy asks for credentials the credentials directory does not hold; what needs them fails closed", "missing", missing)
		}
		s.met.setCredentials(states, missing)
	}
}

func (s *Server) missingCredentials() []string {
	s.creds.mu.Lock()
	defer s.creds.mu.Unlock()
	return s.missingLocked()
}

func (s *Server) missingLocked() []string {
	var out []string
	for n := range s.creds.asked {
		if !s.creds.names[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// ServeCredentials serves the credentials in dir (see the package's File
// credentials) and re-reads them whenever the folder changes, until ctx is
// done. A missing dir serves none, and is watched for once it appears only
// when its parent exists.
func (s *Server) ServeCredentials(ctx context.Context, dir string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("sds: credentials %s: %w", dir, err)
	}
	defer w.Close()
	watched := map[string]bool{}
	watch := func() {
		// The folder, its parent (it may appear or be swapped), and each
		// credential folder (files replaced in place).
		want := map[string]bool{filepath.Dir(dir): true, dir: true}
		if entries, err := os.ReadDir(dir); err == nil {
			for _, e := range entries {
				if p := filepath.Join(dir, e.Name()); isDir(p) {
					want[p] = true
				}
			}
		}
		for p := range want {
			if !watched[p] && w.Add(p) == nil {
				watched[p] = true
			}
		}
		for p := range watched {
			if !want[p] {
				_ = w.Remove(p)
				delete(watched, p)
			}
		}
	}
	watch()
	if _, err := s.loadCredentials(dir); err != nil {
		s.log.Error("credentials", "error", err)
	}
	burst := settle.New(settle.DefaultQuiet, settle.DefaultMax)
	defer burst.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			burst.Event(time.Now())
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Warn("credentials watch error; re-reading", "error", err)
			burst.Event(time.Now())
		case <-burst.C():
			burst.Done()
			watch()
			if _, err := s.loadCredentials(dir); err != nil {
				s.log.Error("credentials", "error", err)
			}
		}
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
