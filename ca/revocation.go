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

	"github.com/vmesh/vmesh/ca/spiffe"
	"github.com/vmesh/vmesh/internal/atomicfile"
)

// MaxRevocationSkew is how far in the future a revocation made elsewhere
// (another replica's clock, the shared state) may be dated: a later
// RevokedAt would revoke an identity's certificates issued until then, so
// such an entry is refused (Validate), never merged.
const MaxRevocationSkew = time.Minute

// Validate checks a revocation made elsewhere before it is applied: it
// names exactly one serial (lower-case hex), SPIFFE identity or token ID,
// is dated, not later than now plus MaxRevocationSkew, and its NotAfter (if
// set) is not before its RevokedAt.
func (rv Revocation) Validate(now time.Time) error {
	n := 0
	for _, v := range []string{rv.Serial, rv.Identity, rv.Token} {
		if v != "" {
			n++
		}
	}
	switch {
	case n == 0:
		return errors.New("revocation: names no serial, identity or token")
	case n > 1:
		return errors.New("revocation: names more than one of a serial, an identity and a token")
	case rv.RevokedAt.IsZero():
		return errors.New("revocation: no revokedAt")
	case rv.RevokedAt.After(now.Add(MaxRevocationSkew)):
		return fmt.Errorf("revocation: revokedAt %s is in the future (now %s, allowed skew %s)", rv.RevokedAt.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), MaxRevocationSkew)
	case !rv.NotAfter.IsZero() && rv.NotAfter.Before(rv.RevokedAt):
		return errors.New("revocation: notAfter is before revokedAt")
	case len(rv.Reason) > 1024:
		return errors.New("revocation: reason longer than 1024 bytes")
	}
	switch {
	case rv.Serial != "":
		s, ok := new(big.Int).SetString(rv.Serial, 16)
		if !ok || s.Sign() <= 0 || s.Text(16) != rv.Serial {
			return errors.New("revocation: serial is not a lower-case hex serial number")
		}
	case rv.Identity != "":
		id, err := spiffe.Parse(rv.Identity)
		if err == nil {
			err = id.Validate()
		}
		if err != nil {
			return fmt.Errorf("revocation: identity: %w", err)
		}
	case len(rv.Token) > 256 || strings.ContainsAny(rv.Token, " \t\n/"):
		return errors.New("revocation: token ID is longer than 256 bytes or has spaces or '/'")
	}
	return nil
}

// Revocation records one revoked certificate (Serial) or one revoked
// identity (Identity): every certificate and bootstrap token for that SPIFFE
// ID issued up to and including the second of RevokedAt.
type Revocation struct {
	Serial    string    `json:"serial,omitempty"`   // lower-case hex
	Identity  string    `json:"identity,omitempty"` // SPIFFE ID
	Token     string    `json:"token,omitempty"`    // a bootstrap token's ID (jti)
	RevokedAt time.Time `json:"revokedAt"`
	// NotAfter is when the entry stops mattering (the certificate's expiry);
	// expired entries are dropped when the list is next written.
	NotAfter time.Time `json:"notAfter,omitzero"`
	Reason   string    `json:"reason,omitempty"`
}

type revocationFile struct {
	Revoked []Revocation `json:"revoked"`
}

// revocations is the revocation list persisted in the data directory. It
// re-reads the file when its modification time or size changes, so a revoke
// done by another process (the CLI) takes effect without a restart.
type revocations struct {
	path string

	mu         sync.Mutex
	modTime    time.Time
	size       int64
	serials    map[string]Revocation
	identities map[string]Revocation
	tokens     map[string]Revocation
	// changed is closed (and replaced) whenever the list is re-read, so
	// watchers of open streams re-check their certificate.
	changed chan struct{}
}

func newRevocations(path string) (*revocations, error) {
	r := &revocations{path: path, changed: make(chan struct{})}
	if err := r.reloadLocked(true); err != nil {
		return nil, err
	}
	return r, nil
}

// reloadLocked re-reads the file if it changed (or always when force).
func (r *revocations) reloadLocked(force bool) error {
	st, err := os.Stat(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		if r.serials == nil || len(r.serials)+len(r.identities)+len(r.tokens) > 0 {
			r.notifyLocked()
		}
		r.serials, r.identities, r.tokens, r.modTime, r.size = map[string]Revocation{}, map[string]Revocation{}, map[string]Revocation{}, time.Time{}, 0
		return nil
	}
	if err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	if !force && r.serials != nil && st.ModTime().Equal(r.modTime) && st.Size() == r.size {
		return nil
	}
	data, err := os.ReadFile(r.path)
	if err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	r.notifyLocked()
	var f revocationFile
	if err := json.Unmarshal(data, &f); err != nil {
		r.serials = nil // stay unreadable until the file changes and parses
		return fmt.Errorf("revocation list %s: %w", r.path, err)
	}
	serials, identities, tokens := map[string]Revocation{}, map[string]Revocation{}, map[string]Revocation{}
	for _, rv := range f.Revoked {
		switch {
		case rv.Serial != "":
			serials[rv.Serial] = rv
		case rv.Identity != "":
			identities[rv.Identity] = rv
		case rv.Token != "":
			tokens[rv.Token] = rv
		}
	}
	r.serials, r.identities, r.tokens, r.modTime, r.size = serials, identities, tokens, st.ModTime(), st.Size()
	return nil
}

// notifyLocked wakes the watchers of the list.
func (r *revocations) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// changes returns a channel closed at the next re-read of the list.
func (r *revocations) changes() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// refresh re-reads the list if the file changed (waking the watchers).
func (r *revocations) refresh() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked(false)
}

// check reports the entry that revokes a certificate or token: its serial
// (nil for tokens) or its identity when issued no later than the second the
// identity was revoked. An unreadable list is an error, and callers refuse:
// failing closed is the safe side for renewals.
func (r *revocations) check(serial *big.Int, identity string, issued time.Time) (Revocation, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reloadLocked(false); err != nil {
		return Revocation{}, false, err
	}
	if serial != nil {
		if rv, ok := r.serials[serial.Text(16)]; ok {
			return rv, true, nil
		}
	}
	if rv, ok := r.identities[identity]; ok && !issued.Truncate(time.Second).After(rv.RevokedAt.Truncate(time.Second)) {
		return rv, true, nil
	}
	return Revocation{}, false, nil
}

// checkToken reports whether a bootstrap token was revoked by its ID. An
// unreadable list is an error (callers refuse).
func (r *revocations) checkToken(id string) (Revocation, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reloadLocked(false); err != nil {
		return Revocation{}, false, err
	}
	rv, ok := r.tokens[id]
	return rv, ok && id != "", nil
}

// add records a revocation and writes the list, dropping entries that no
// longer matter at now.
func (r *revocations) add(rv Revocation, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reloadLocked(true); err != nil {
		return err
	}
	r.setLocked(rv)
	return r.writeLocked(now)
}

// setLocked puts rv in its map.
func (r *revocations) setLocked(rv Revocation) {
	switch {
	case rv.Serial != "":
		r.serials[rv.Serial] = rv
	case rv.Token != "":
		r.tokens[rv.Token] = rv
	default:
		r.identities[rv.Identity] = rv
	}
}

// merge records the entries of rvs the list lacks (for an identity: a later
// RevokedAt than the one listed), writing the list once if any is new, and
// returns how many were new. Entries already expired at now, and entries
// that are not valid at now (Validate: a future-dated one above all), are
// skipped.
func (r *revocations) merge(rvs []Revocation, now time.Time) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reloadLocked(false); err != nil {
		return 0, err
	}
	n := 0
	for _, rv := range rvs {
		if !rv.NotAfter.IsZero() && rv.NotAfter.Before(now) || rv.Validate(now) != nil {
			continue
		}
		var cur Revocation
		var ok bool
		switch {
		case rv.Serial != "":
			cur, ok = r.serials[rv.Serial]
		case rv.Token != "":
			cur, ok = r.tokens[rv.Token]
		case rv.Identity != "":
			cur, ok = r.identities[rv.Identity]
		default:
			continue
		}
		if ok && !rv.RevokedAt.After(cur.RevokedAt) {
			continue
		}
		r.setLocked(rv)
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return n, r.writeLocked(now)
}

// writeLocked writes the list (without the entries expired at now) and
// re-reads it, waking the watchers.
func (r *revocations) writeLocked(now time.Time) error {
	f := revocationFile{Revoked: []Revocation{}}
	for _, m := range []map[string]Revocation{r.serials, r.identities, r.tokens} {
		for _, e := range m {
			if !e.NotAfter.IsZero() && e.NotAfter.Before(now) {
				continue
			}
			f.Revoked = append(f.Revoked, e)
		}
	}
	SortRevocations(f.Revoked)
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	if err := atomicfile.Write(r.path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write revocation list: %w", err)
	}
	return r.reloadLocked(true)
}

func (r *revocations) list() []Revocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.reloadLocked(false)
	var out []Revocation
	for _, m := range []map[string]Revocation{r.serials, r.identities, r.tokens} {
		for _, e := range m {
			out = append(out, e)
		}
	}
	SortRevocations(out)
	return out
}

// SortRevocations sorts a revocation list as the CA lists it: by identity,
// token, then serial.
func SortRevocations(rs []Revocation) {
	slices.SortFunc(rs, func(a, b Revocation) int {
		if c := strings.Compare(a.Identity, b.Identity); c != 0 {
			return c
		}
		if c := strings.Compare(a.Token, b.Token); c != 0 {
			return c
		}
		return strings.Compare(a.Serial, b.Serial)
	})
}
