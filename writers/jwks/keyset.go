package jwks

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
)

// privateMembers are the JWK members of private and symmetric key
// material (RFC 7518 §6.2.2, §6.3.2, §6.4.1; RFC 8037 §2).
var privateMembers = []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k"}

// algorithms are the signature algorithms each key type may name.
var algorithms = map[string][]string{
	"RSA": {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"},
	"EC":  {"ES256", "ES384", "ES512"},
	"OKP": {"EdDSA"},
}

// minRSABits is the shortest RSA modulus accepted.
const minRSABits = 2048

// curves are the curves of the ECDSA algorithms.
var curves = map[string]string{"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}

// PublicKeySet parses body as a JSON Web Key Set and returns the JSON of
// its public signature keys, re-serialised (a jose.JSONWebKeySet holding
// for each key only its public parameters, kid, alg and use), with a note
// for each key it refused. Keys are RSA, EC (P-256, P-384, P-521) or OKP
// (Ed25519) public keys with use "sig" or none and an alg, if any, that
// fits the key type. A key that carries private or symmetric key material
// is refused (it is not published, not even its public part). Members of
// the set or of a key that are not listed above never reach the result.
// A body that is not a JSON object with a "keys" array, or where no key
// remains, is an error; neither the error nor the notes quote the body.
func PublicKeySet(body []byte) (string, []string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return "", nil, errors.New("not a JSON Web Key Set: not a JSON object")
	}
	raw, ok := top["keys"]
	if !ok {
		return "", nil, errors.New(`not a JSON Web Key Set: no "keys" member`)
	}
	var keys []json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return "", nil, errors.New(`not a JSON Web Key Set: "keys" is not an array`)
	}
	var out []jose.JSONWebKey
	var notes []string
	for i, k := range keys {
		key, why := publicKey(k)
		if why != "" {
			notes = append(notes, fmt.Sprintf("keys[%d] refused: %s", i, why))
			continue
		}
		out = append(out, key)
	}
	if len(out) == 0 {
		if len(keys) == 0 {
			return "", nil, errors.New(`not a JSON Web Key Set: "keys" is empty`)
		}
		return "", nil, fmt.Errorf("no public signature key in the key set (%s)", strings.Join(notes, "; "))
	}
	js, err := json.Marshal(jose.JSONWebKeySet{Keys: out})
	if err != nil {
		return "", nil, fmt.Errorf("re-serialising the key set: %w", err)
	}
	return string(js), notes, nil
}

// publicKey parses one key of a set; why says why it is refused.
func publicKey(raw json.RawMessage) (jose.JSONWebKey, string) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil || members == nil {
		return jose.JSONWebKey{}, "not a JSON object"
	}
	for _, m := range privateMembers {
		if _, ok := members[m]; ok {
			return jose.JSONWebKey{}, fmt.Sprintf("it carries private or symmetric key material (%q)", m)
		}
	}
	var kty, use string
	if json.Unmarshal(members["kty"], &kty) != nil {
		return jose.JSONWebKey{}, `"kty" is not a string`
	}
	allowed, ok := algorithms[kty]
	if !ok {
		return jose.JSONWebKey{}, `"kty" is not RSA, EC or OKP`
	}
	if u, ok := members["use"]; ok && (json.Unmarshal(u, &use) != nil || use != "sig") {
		return jose.JSONWebKey{}, `"use" is not "sig"`
	}
	// Only the members a public key of this type has are parsed, so that
	// certificates (x5c, x5u, x5t) and unknown members play no part.
	public := map[string]json.RawMessage{}
	for _, m := range []string{"kty", "kid", "alg", "use", "n", "e", "crv", "x", "y"} {
		if v, ok := members[m]; ok {
			public[m] = v
		}
	}
	js, err := json.Marshal(public)
	if err != nil {
		return jose.JSONWebKey{}, "not a JSON object"
	}
	var k jose.JSONWebKey
	if err := k.UnmarshalJSON(js); err != nil {
		return jose.JSONWebKey{}, fmt.Sprintf("not a valid %s public key", kty)
	}
	if !k.IsPublic() || !k.Valid() {
		return jose.JSONWebKey{}, fmt.Sprintf("not a valid %s public key", kty)
	}
	if k.Algorithm != "" && !slices.Contains(allowed, k.Algorithm) {
		return jose.JSONWebKey{}, fmt.Sprintf(`"alg" is not a signature algorithm of a %s key`, kty)
	}
	if r, ok := k.Key.(*rsa.PublicKey); ok && r.N.BitLen() < minRSABits {
		return jose.JSONWebKey{}, fmt.Sprintf("an RSA key shorter than %d bits", minRSABits)
	}
	if ec, ok := k.Key.(*ecdsa.PublicKey); ok && k.Algorithm != "" && curves[k.Algorithm] != ec.Curve.Params().Name {
		return jose.JSONWebKey{}, `"alg" does not fit the key's curve`
	}
	pub := k.Public()
	if !pub.Valid() {
		return jose.JSONWebKey{}, fmt.Sprintf("not a valid %s public key", kty)
	}
	return jose.JSONWebKey{Key: pub.Key, KeyID: k.KeyID, Algorithm: k.Algorithm, Use: k.Use}, ""
}
