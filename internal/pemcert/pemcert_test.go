package pemcert_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/pemcert"
)

func selfSigned(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseEncodeMerge(t *testing.T) {
	a, b := selfSigned(t, "a"), selfSigned(t, "b")
	ab := pemcert.Encode([]*x509.Certificate{a, b})
	got, err := pemcert.Parse(ab)
	if err != nil || len(got) != 2 || got[0].Subject.CommonName != "a" || got[1].Subject.CommonName != "b" {
		t.Fatalf("Parse(Encode(a, b)) = %v, %v", got, err)
	}
	merged, err := pemcert.Merge(pemcert.Encode([]*x509.Certificate{a}), ab)
	if err != nil {
		t.Fatal(err)
	}
	if string(merged) != string(ab) {
		t.Errorf("Merge(a, a+b) is not a+b once each:\n%s", merged)
	}
	key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("k")})
	for name, bad := range map[string][]byte{
		"empty":          nil,
		"a key":          key,
		"trailing bytes": append(append([]byte{}, ab...), "not pem"...),
		"broken cert":    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("nope")}),
	} {
		if _, err := pemcert.Parse(bad); err == nil {
			t.Errorf("%s: parsed", name)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: multi-line error %q", name, err)
		}
	}
}
