package ca

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Revocation records one revoked certificate.
type Revocation struct {
	Serial    string    `json:"serial"` // lower-case hex
	RevokedAt time.Time `json:"revokedAt"`
	NotAfter  time.Time `json:"notAfter,omitzero"` // entries are dropped once the certificate has expired
	Reason    string    `json:"reason,omitempty"`
}

type revocationFile struct {
	Revoked []Revocation `json:"revoked"`
}

// revocations is the revocation list persisted in the data directory. It
// re-reads the file when its modification time or size changes, so a revoke
// done by another process (the CLI) takes effect without a restart.
type revocations struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	serials map[string]Revocation
}

func newRevocations(path string) (*revocations, error) {
	r := &revocations{path: path, serials: map[string]Revocation{}}
	if err := r.reloadLocked(true); err != nil {
		return nil, err
	}
	return r, nil
}

// reloadLocked re-reads the file if it changed (or always when force).
func (r *revocations) reloadLocked(force bool) error {
	st, err := os.Stat(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		r.serials, r.modTime, r.size = map[string]Revocation{}, time.Time{}, 0
		return nil
	}
	if err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	if !force && st.ModTime().Equal(r.modTime) && st.Size() == r.size {
		return nil
	}
	data, err := os.ReadFile(r.path)
	if err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	var f revocationFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("revocation list %s: %w", r.path, err)
	}
	m := make(map[string]Revocation, len(f.Revoked))
	for _, rv := range f.Revoked {
		m[rv.Serial] = rv
	}
	r.serials, r.modTime, r.size = m, st.ModTime(), st.Size()
	return nil
}

// isRevoked reports whether the serial is on the list. An unreadable list
// counts as revoked: failing closed is the safe side for renewals.
func (r *revocations) isRevoked(serial *big.Int) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reloadLocked(false); err != nil {
		return true, err
	}
	_, ok := r.serials[serial.Text(16)]
	return ok, nil
}

// add records a revocation and writes the list, dropping entries whose
// certificates expired before now.
func (r *revocations) add(rv Revocation, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reloadLocked(true); err != nil {
		return err
	}
	r.serials[rv.Serial] = rv
	f := revocationFile{Revoked: []Revocation{}}
	for _, e := range r.serials {
		if !e.NotAfter.IsZero() && e.NotAfter.Before(now) {
			continue
		}
		f.Revoked = append(f.Revoked, e)
	}
	sortRevocations(f.Revoked)
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	if err := writeFileAtomic(r.path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write revocation list: %w", err)
	}
	return r.reloadLocked(true)
}

func (r *revocations) list() []Revocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.reloadLocked(false)
	out := make([]Revocation, 0, len(r.serials))
	for _, e := range r.serials {
		out = append(out, e)
	}
	sortRevocations(out)
	return out
}

func sortRevocations(rs []Revocation) {
	slices.SortFunc(rs, func(a, b Revocation) int { return strings.Compare(a.Serial, b.Serial) })
}
