package jwks

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

// The address policy: global unicast addresses pass; every non-global
// range is refused, in its IPv4-mapped, NAT64 and 6to4 forms too, unless
// allowed; blocked ranges win over allowed ones; unspecified, multicast
// and broadcast addresses are never allowed.
func TestAddressPolicy(t *testing.T) {
	none := policy{}
	allowed := policy{
		allowed: normalise([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::ffff:127.0.0.0/104"), netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}),
		blocked: normalise([]netip.Prefix{netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix("8.8.4.0/24")}),
	}
	for _, c := range []struct {
		addr          string
		none, allowed string // "" passes, else a part of the refusal
	}{
		{"8.8.8.8", "", ""},
		{"2606:4700:4700::1111", "", ""},
		{"8.8.4.4", "", "blocked range 8.8.4.0/24"},
		{"127.0.0.1", "loopback", ""},
		{"127.0.0.2", "loopback", ""},
		{"::1", "loopback", ""},
		{"::ffff:127.0.0.1", "loopback", ""},
		{"169.254.169.254", "link-local", ""},
		{"::ffff:169.254.169.254", "link-local", ""},
		{"64:ff9b::a9fe:a9fe", "embeds 169.254.169.254", ""},
		{"2002:7f00:1::1", "embeds 127.0.0.1", ""},
		{"64:ff9b::808:808", "", ""},
		{"fe80::1%eth0", "link-local", ""},
		{"10.1.2.3", "private", ""},
		{"10.9.1.1", "private", "blocked range 10.9.0.0/16"},
		{"::ffff:10.9.1.1", "private", "blocked range 10.9.0.0/16"},
		{"172.16.5.4", "private", ""},
		{"192.168.1.1", "private", ""},
		{"fd00::1", "private", ""},
		{"100.64.1.1", "CGNAT", ""},
		{"0.1.2.3", "this network", ""},
		{"198.18.0.1", "benchmarking", ""},
		{"240.0.0.1", "reserved", ""},
		{"0.0.0.0", "unspecified", "unspecified"},
		{"::", "unspecified", "unspecified"},
		{"::ffff:0.0.0.0", "unspecified", "unspecified"},
		{"224.0.0.1", "multicast", "multicast"},
		{"ff02::1", "multicast", "multicast"},
		{"255.255.255.255", "broadcast", "broadcast"},
	} {
		a := netip.MustParseAddr(c.addr)
		for _, p := range []struct {
			name string
			p    policy
			want string
		}{{"default", none, c.none}, {"allowed", allowed, c.allowed}} {
			got := p.p.refusal(a)
			if (got == "") != (p.want == "") || !strings.Contains(got, p.want) {
				t.Errorf("%s, %s policy: refusal %q, want %q", c.addr, p.name, got, p.want)
			}
		}
	}
}

// PublicKeySet keeps RSA, EC and Ed25519 public signature keys with their
// kid, alg and use only, and refuses the rest with a note each.
func TestPublicKeySet(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ed, _, _ := ed25519.GenerateKey(rand.Reader)
	enc := func(k jose.JSONWebKey) json.RawMessage {
		js, err := json.Marshal(k)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	keys := []json.RawMessage{
		enc(jose.JSONWebKey{Key: &ec.PublicKey, KeyID: "ec", Algorithm: "ES256", Use: "sig"}),
		enc(jose.JSONWebKey{Key: ed, KeyID: "ed", Algorithm: "EdDSA"}),
		enc(jose.JSONWebKey{Key: &ec.PublicKey, KeyID: "ec-wrong-alg", Algorithm: "ES384"}),
		enc(jose.JSONWebKey{Key: &ec.PublicKey, KeyID: "ec-rsa-alg", Algorithm: "RS256"}),
		enc(jose.JSONWebKey{Key: &ec.PublicKey, KeyID: "ec-enc", Use: "enc"}),
		json.RawMessage(`{"kty":"RSA","e":"AQAB","n":"0xObjM0UvS_oaazjpEYlAbwctEJ4L8pH3OuTb7qth7gUwqet"}`),
		json.RawMessage(`"a string"`),
	}
	body, _ := json.Marshal(map[string]any{"keys": keys, "extra": "dropped"})
	got, notes, err := PublicKeySet(body)
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal([]byte(got), &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 || set.Keys[0].KeyID != "ec" || set.Keys[1].KeyID != "ed" || strings.Contains(got, "extra") {
		t.Errorf("kept %s, want the EC and Ed25519 keys only", got)
	}
	want := []string{"keys[2] refused: \"alg\" does not fit", "keys[3] refused: \"alg\" is not a signature algorithm", "keys[4] refused: \"use\"", "keys[5] refused: an RSA key shorter", "keys[6] refused: not a JSON object"}
	if len(notes) != len(want) {
		t.Fatalf("notes %q, want %q", notes, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(notes[i], w) {
			t.Errorf("note %q, want %q", notes[i], w)
		}
	}
	for _, bad := range []string{``, `null`, `[]`, `{}`, `{"keys":{}}`, `{"keys":[]}`, `{"keys":null}`, `{"keys":[{"kty":"oct","k":"AAAA"}]}`} {
		if _, _, err := PublicKeySet([]byte(bad)); err == nil {
			t.Errorf("%q accepted as a key set", bad)
		}
	}
}
