package sds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/fsnotify/fsnotify"

	"github.com/vmesh/vmesh/internal/filecert"
	"github.com/vmesh/vmesh/internal/settle"
)

// Certificate files: a Gateway server with serverCertificate, privateKey
// and caCertificates (no credentialName) makes the router ask its agent's
// SDS for Istio's names "file-cert:<cert>~<key>" and "file-root:<ca>"
// (internal/filecert). The agent reads those files on the VM when Envoy
// asks for them and serves their contents; the private key never travels
// over xDS, only its path does.
//
// Least privilege: the paths come from the config authors, and the agent
// runs with more rights than Envoy, so it reads a file only when its real
// path (every symbolic link resolved) is inside a directory the VM's
// operator allowed (AllowFileDirs: `vmesh agent --cert-file-dirs`, the
// credentials directory by default). It opens it without following a
// last link, and refuses what is not a regular file or is writable by
// group or others; a certificate must pair with its key and roots must be
// PEM certificates, so a file that is not one (/etc/shadow in an allowed
// directory) is never served either. A name it refuses is not served:
// what needs it fails closed (the listener's chain has no certificate),
// and the agent reports the refusal to the control plane (Report), which
// warns (VM1019) on the Gateway and in `vmesh status` for that proxy.
//
// Served files are re-read when they change (WatchFiles; a Kubernetes-style
// "..data" swap included): new contents are pushed to Envoy, invalid ones
// keep the last good version, a file that disappears or leaves the allowed
// directories is withdrawn.

// RefusedPrefix starts a report entry (Report) for a certificate file
// name Envoy asked for and the agent refuses: "refused:<name>\t<reason>".
const RefusedPrefix = filecert.RefusedPrefix

// maxFileSize bounds a certificate file read (a PEM chain is a few KiB).
const maxFileSize = 1 << 20

// FileState is one certificate file name Envoy asked for, as last read.
type FileState struct {
	// Name is the SDS name ("file-cert:<cert>~<key>", "file-root:<ca>").
	Name string `json:"name"`
	// Served is whether a version of it is served (the last good one when
	// Error is set).
	Served bool `json:"served"`
	// Error is why its files are refused ("" when they are served as
	// they are now).
	Error string `json:"error,omitempty"`
}

// files is the Server's certificate-file state.
type files struct {
	mu sync.Mutex
	// allowed are the directories files may be read from, their real
	// paths; none: every file name is refused.
	allowed []string
	states  map[string]*FileState
	// wake tells WatchFiles that a new name was asked for.
	wake chan struct{}
}

// AllowFileDirs sets the directories the Server may read certificate files
// from (absolute paths; each is resolved to its real path, a missing one
// kept as written). Call it before Serve.
func (s *Server) AllowFileDirs(dirs []string) error {
	var out []string
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if !filepath.IsAbs(d) {
			return fmt.Errorf("sds: certificate file directory %q is not absolute", d)
		}
		d = filepath.Clean(d)
		if real, err := filepath.EvalSymlinks(d); err == nil {
			d = real
		}
		out = append(out, d)
	}
	s.files.mu.Lock()
	s.files.allowed = out
	s.files.mu.Unlock()
	return nil
}

// within reports whether path p is dir or inside it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// readAllowed reads the file at p if its real path is in one of the
// allowed directories, a regular file not writable by group or others.
func readAllowed(p string, allowed []string) ([]byte, error) {
	if why := filecert.PathProblem(p); why != "" {
		return nil, errors.New(why)
	}
	if len(allowed) == 0 {
		return nil, fmt.Errorf("%s: the agent allows no certificate file directory (vmesh agent --cert-file-dirs)", p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(allowed, func(d string) bool { return within(real, d) }) {
		return nil, fmt.Errorf("%s (%s) is outside the directories the agent may read certificate files from (%s): refused", p, real, strings.Join(allowed, ", "))
	}
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s is writable by group or others (mode %04o): refused", p, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, maxFileSize)
	}
	return b, nil
}

// fileSecret reads the files of a certificate file name and builds its
// secret.
func fileSecret(name string, allowed []string) (*tlsv3.Secret, error) {
	cert, key, ca, ok := filecert.Parse(name)
	if !ok {
		return nil, fmt.Errorf("%q is not a certificate file name", name)
	}
	if ca != "" {
		roots, err := readAllowed(ca, allowed)
		if err != nil {
			return nil, err
		}
		if !x509.NewCertPool().AppendCertsFromPEM(roots) {
			return nil, fmt.Errorf("%s: no PEM certificate", ca)
		}
		return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: inlineBytes(roots),
		}}}, nil
	}
	chain, err := readAllowed(cert, allowed)
	if err != nil {
		return nil, err
	}
	k, err := readAllowed(key, allowed)
	if err != nil {
		return nil, err
	}
	if _, err := tls.X509KeyPair(chain, k); err != nil {
		return nil, fmt.Errorf("%s and %s: %w", cert, key, err)
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: inlineBytes(chain),
		PrivateKey:       inlineBytes(k),
	}}}, nil
}

// askFiles loads the certificate file names of a request not asked for
// before, so that the request is answered with them.
func (s *Server) askFiles(names []string) {
	var fresh []string
	s.files.mu.Lock()
	for _, n := range names {
		if filecert.IsName(n) && s.files.states[n] == nil {
			s.files.states[n] = &FileState{Name: n}
			fresh = append(fresh, n)
		}
	}
	s.files.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	s.reloadFiles(fresh)
	select {
	case s.files.wake <- struct{}{}:
	default:
	}
}

// reloadFiles (re)reads the files of names and serves, keeps or withdraws
// each; then reports.
func (s *Server) reloadFiles(names []string) {
	s.files.mu.Lock()
	allowed := slices.Clone(s.files.allowed)
	s.files.mu.Unlock()
	upsert := map[string]types.Resource{}
	var remove []string
	for _, n := range names {
		sec, err := fileSecret(n, allowed)
		if err == nil {
			err = sec.ValidateAll()
		}
		s.files.mu.Lock()
		st := s.files.states[n]
		switch {
		case err == nil:
			upsert[n] = sec
			st.Served, st.Error = true, ""
		case st.Served && !errors.Is(err, os.ErrNotExist) && !strings.Contains(err.Error(), "outside the directories"):
			st.Error = err.Error() // invalid contents: the last good version keeps serving
			s.log.Warn("certificate files refused; their last good version keeps serving", "name", n, "error", err)
		default:
			if st.Served {
				remove = append(remove, n)
			}
			st.Served, st.Error = false, err.Error()
			s.log.Warn("certificate files refused; what needs them fails closed", "name", n, "error", err)
		}
		s.files.mu.Unlock()
	}
	if len(upsert) > 0 || len(remove) > 0 {
		if err := s.cache.UpdateResources(upsert, remove); err != nil {
			s.log.Error("certificate files", "error", err)
		}
	}
	s.report()
}

// Files returns the state of every certificate file name Envoy asked for,
// by name.
func (s *Server) Files() []FileState {
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	out := make([]FileState, 0, len(s.files.states))
	for _, st := range s.files.states {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b FileState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Report is what the agent tells the control plane it holds: the
// credential secrets (Held), the certificate file names it serves, and
// for each file name Envoy asked for that it refuses
// "refused:<name>\t<reason>" (RefusedPrefix). A file name not asked for
// yet is in neither.
func (s *Server) Report() []string {
	out := s.Held()
	for _, f := range s.Files() {
		switch {
		case f.Served:
			out = append(out, f.Name)
		case f.Error != "":
			out = append(out, RefusedPrefix+f.Name+"\t"+f.Error)
		}
	}
	return out
}

// report sends Report to the OnHeld callback.
func (s *Server) report() {
	if s.creds.onHeld != nil {
		s.creds.onHeld(s.Report())
	}
}

// WatchFiles re-reads the certificate files Envoy asked for whenever their
// directories change, until ctx is done.
func (s *Server) WatchFiles(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("sds: certificate files: %w", err)
	}
	defer w.Close()
	watched := map[string]bool{}
	watch := func() {
		for _, f := range s.Files() {
			cert, key, ca, _ := filecert.Parse(f.Name)
			for _, p := range []string{cert, key, ca} {
				if p == "" {
					continue
				}
				dirs := []string{filepath.Dir(p)}
				if real, err := filepath.EvalSymlinks(p); err == nil {
					dirs = append(dirs, filepath.Dir(real))
				}
				for _, d := range dirs {
					if !watched[d] && w.Add(d) == nil {
						watched[d] = true
					}
				}
			}
		}
	}
	watch()
	burst := settle.New(settle.DefaultQuiet, settle.DefaultMax)
	defer burst.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.files.wake:
			watch()
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			burst.Event(time.Now())
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Warn("certificate files watch error; re-reading", "error", err)
			burst.Event(time.Now())
		case <-burst.C():
			burst.Done()
			watch()
			var names []string
			for _, f := range s.Files() {
				names = append(names, f.Name)
			}
			s.reloadFiles(names)
		}
	}
}
