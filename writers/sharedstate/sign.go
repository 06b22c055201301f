package sharedstate

import (
	"bytes"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/vmesh/vmesh/ca"
)

// MinKeyBytes is the shortest state key accepted.
const MinKeyBytes = 32

// Key authenticates the records replicas share: every record is written
// as an envelope with an HMAC-SHA256 over its backend name and body, and a
// record without a valid one is refused. Only the replicas (and `vmesh ca
// revoke --state`) hold it.
type Key struct {
	mac []byte
	// id names the key in envelopes (not secret: a hash), so a record
	// signed with another key is told apart from a forged one.
	id string
}

// NewKey makes a Key of secret, at least MinKeyBytes long.
func NewKey(secret []byte) (Key, error) {
	if len(secret) < MinKeyBytes {
		return Key{}, fmt.Errorf("state key: %d bytes, want at least %d random bytes (head -c 32 /dev/urandom > state.key)", len(secret), MinKeyBytes)
	}
	mac, err := hkdf.Key(sha256.New, secret, []byte("vmesh shared state"), "record hmac v1", 32)
	if err != nil {
		return Key{}, fmt.Errorf("state key: %w", err)
	}
	id := sha256.Sum256(append([]byte("vmesh shared state key id\x00"), mac...))
	return Key{mac: mac, id: hex.EncodeToString(id[:6])}, nil
}

// LoadKeyFile reads a state key file (state.keyFile, --state-key-file):
// at least MinKeyBytes bytes, used as they are.
func LoadKeyFile(path string) (Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("state key file: %w", err)
	}
	k, err := NewKey(data)
	if err != nil {
		return Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// KeyFromCACerts derives the state key from the issuing key of an Istio
// plug-in cacerts directory (its ca-key.pem), which every replica holds
// when they share one issuing CA (the tested layout): HKDF-SHA256 over the
// key's PKCS #8 encoding, so the same key in any PEM encoding gives the
// same state key. Replicas with one intermediate each need a key file.
func KeyFromCACerts(dir string) (Key, error) {
	p := filepath.Join(dir, ca.PluginCAKeyFile)
	data, err := os.ReadFile(p)
	if err != nil {
		return Key{}, fmt.Errorf("state key from the CA: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return Key{}, fmt.Errorf("state key from the CA: %s holds no PEM block", p)
	}
	var priv any
	switch block.Type {
	case "EC PRIVATE KEY":
		priv, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		priv, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		priv, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return Key{}, fmt.Errorf("state key from the CA: %s: %w", p, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return Key{}, fmt.Errorf("state key from the CA: %s: %w", p, err)
	}
	secret, err := hkdf.Key(sha256.New, der, []byte("vmesh shared state from ca-key.pem"), "state key v1", 32)
	if err != nil {
		return Key{}, fmt.Errorf("state key from the CA: %w", err)
	}
	return NewKey(secret)
}

// ID names the key (a hash of it, not secret).
func (k Key) ID() string { return k.id }

// ZooKeeperDigest returns the user and password of the digest ACL vmesh
// puts on its ZooKeeper nodes, derived from the key: every replica has
// them, and whoever holds the key can compute them (zkCli.sh: addauth
// digest vmesh:PASSWORD).
func (k Key) ZooKeeperDigest() (user, password string) {
	pw, _ := hkdf.Key(sha256.New, k.mac, nil, "zookeeper digest v1", 24)
	return "vmesh", base64.RawURLEncoding.EncodeToString(pw)
}

func (k Key) valid() bool { return len(k.mac) == 32 }

// envelope is how every shared record is stored: the record's JSON (Body),
// the ID of the key that signed it, and the HMAC of its name and body.
type envelope struct {
	Version int             `json:"v"`
	KeyID   string          `json:"kid"`
	Sig     string          `json:"sig"`
	Body    json.RawMessage `json:"body"`
}

// The reasons a shared record is refused (RefusedRecord.Reason, the
// vmesh_shared_state_refused_records_total label).
const (
	ReasonUnreadable   = "unreadable"    // not JSON, or not a record
	ReasonUnsigned     = "unsigned"      // no envelope or no signature
	ReasonOtherKey     = "other-key"     // signed with a key this replica does not hold
	ReasonBadSignature = "bad-signature" // the signature does not match its name and body
	ReasonUnbound      = "unbound"       // not held by the live session of the replica it names
	ReasonInvalid      = "invalid"       // fails validation as the same object in a file would
	ReasonFuture       = "future"        // dated later than now plus the allowed clock skew
)

// refusal is why a record is refused: a Reason and a message that never
// quotes the record's value.
type refusal struct {
	reason string
	msg    string
}

func (r *refusal) Error() string { return r.reason + ": " + r.msg }

func refuse(reason, format string, args ...any) *refusal {
	return &refusal{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// macOf is the HMAC of a record: the version, the state's prefix, the
// record's name in it ("registrations/<name>", "replicas/<id>",
// "revocations/<name>") and its body, so a record cannot be replayed under
// another name or prefix.
func (k Key) macOf(prefix, name string, body []byte) []byte {
	h := hmac.New(sha256.New, k.mac)
	for _, part := range [][]byte{[]byte("vmesh shared state v1"), []byte(prefix), []byte(name)} {
		h.Write([]byte(strconv.Itoa(len(part))))
		h.Write([]byte{':'})
		h.Write(part)
	}
	h.Write(body)
	return h.Sum(nil)
}

// seal wraps body (compact JSON) in a signed envelope for name.
func (k Key) seal(prefix, name string, body []byte) []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"v":1,"kid":"`)
	buf.WriteString(k.id)
	buf.WriteString(`","sig":"`)
	buf.WriteString(base64.StdEncoding.EncodeToString(k.macOf(prefix, name, body)))
	buf.WriteString(`","body":`)
	buf.Write(body)
	buf.WriteString("}")
	return buf.Bytes()
}

// open checks data's envelope for name and returns its body.
func (k Key) open(prefix, name string, data []byte) ([]byte, *refusal) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, refuse(ReasonUnreadable, "not a JSON envelope")
	}
	switch {
	case env.Sig == "" || len(env.Body) == 0:
		return nil, refuse(ReasonUnsigned, "no signature (written by something other than a replica of this mesh)")
	case env.Version != 1:
		return nil, refuse(ReasonUnreadable, "envelope version %d (this replica reads 1)", env.Version)
	case env.KeyID != k.id:
		return nil, refuse(ReasonOtherKey, "signed with key %.16q, this replica holds key %s (give every replica the same state key)", env.KeyID, k.id)
	}
	sig, err := base64.StdEncoding.DecodeString(env.Sig)
	if err != nil || !hmac.Equal(sig, k.macOf(prefix, name, env.Body)) {
		return nil, refuse(ReasonBadSignature, "the signature does not match the record and its name")
	}
	return env.Body, nil
}
