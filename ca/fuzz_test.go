package ca_test

import (
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/ca"
)

// FuzzVerifyToken feeds arbitrary strings, seeded with real, expired,
// foreign and tampered tokens, to the token parser. It must never panic,
// every rejection must carry a token reason, and anything accepted must be
// exactly the identity the CA signed (the signature covers every claim).
func FuzzVerifyToken(f *testing.F) {
	clock := newTestClock()
	c, _, _ := newTestCA(f, func(cfg *ca.Config) { cfg.Now = clock.Now })
	other, _, _ := newTestCA(f, nil)
	mint := func(c *ca.CA, req ca.TokenRequest) string {
		req.Namespace, req.ServiceAccount = "shop", "cart"
		raw, _, err := c.CreateToken(req)
		if err != nil {
			f.Fatal(err)
		}
		return raw
	}
	good := mint(c, ca.TokenRequest{WorkloadGroup: "cart-vms"})
	f.Add(good)
	f.Add(mint(c, ca.TokenRequest{Audience: "other"}))
	f.Add(mint(other, ca.TokenRequest{}))
	f.Add(good[:strings.LastIndex(good, ".")+1])
	f.Add("eyJhbGciOiJub25lIn0." + strings.Split(good, ".")[1] + ".")
	// Inputs that need no CA are in testdata/fuzz/FuzzVerifyToken.

	f.Fuzz(func(t *testing.T, raw string) {
		claims, err := c.VerifyToken(raw)
		if err != nil {
			var e *ca.Error
			if !errors.As(err, &e) {
				t.Fatalf("rejection is %T, not *ca.Error: %v", err, err)
			}
			switch e.Reason {
			case ca.ReasonNoCredentials, ca.ReasonTokenMalformed, ca.ReasonTokenSignature, ca.ReasonTokenExpired,
				ca.ReasonTokenNotYetValid, ca.ReasonTokenAudience, ca.ReasonTokenClaims, ca.ReasonTokenRevoked:
			default:
				t.Fatalf("token rejected with non-token reason %q: %v", e.Reason, err)
			}
			return
		}
		if claims.Identity != testID || claims.WorkloadGroup != "cart-vms" {
			t.Fatalf("accepted token asserts %+v; only %s/cart-vms was ever signed", claims, testID)
		}
	})
}

// FuzzCheckCSR feeds arbitrary CSRs (raw DER wrapped in PEM, or arbitrary
// PEM text) to the CSR checks. It must never panic, every rejection must
// carry a CSR reason, and any accepted CSR must sign into a certificate whose
// only SAN is the caller's SPIFFE ID.
func FuzzCheckCSR(f *testing.F) {
	c, _, _ := newTestCA(f, nil)
	der := func(p []byte) []byte {
		b, _ := pem.Decode(p)
		return b.Bytes
	}
	own, _ := newCSR(f, []string{testID.String()}, nil)
	f.Add(der(own), true)
	f.Add(own, false)
	f.Add(der(mustCSRTB(f, nil, nil)), true)
	f.Add(der(mustCSRTB(f, []string{"spiffe://cluster.local/ns/shop/sa/admin"}, nil)), true)
	f.Add(der(mustCSRTB(f, nil, []string{"db.internal"})), true)
	// Inputs that need no key are in testdata/fuzz/FuzzCheckCSR.

	f.Fuzz(func(t *testing.T, data []byte, wrap bool) {
		in := data
		if wrap {
			in = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: data})
		}
		_, err := ca.CheckCSR(in, testID)
		if err != nil {
			if r := ca.ReasonOf(err); r != ca.ReasonCSRInvalid && r != ca.ReasonCSRIdentity {
				t.Fatalf("CSR rejected with reason %q: %v", r, err)
			}
			return
		}
		leaf, _, err := c.SignCSR(in, testID, 0)
		if err != nil {
			t.Fatalf("CheckCSR accepted but SignCSR failed: %v", err)
		}
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != testID.String() ||
			len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 || leaf.IsCA {
			t.Fatalf("accepted CSR produced SANs %v %v %v %v (CA %v)", leaf.URIs, leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses, leaf.IsCA)
		}
	})
}

func mustCSRTB(tb testing.TB, uris, dns []string) []byte {
	tb.Helper()
	csr, _ := newCSR(tb, uris, dns)
	return csr
}
