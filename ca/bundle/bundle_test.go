package bundle_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vmesh/vmesh/ca/bundle"
)

func rootPEM(t *testing.T, isCA bool) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "root"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true, IsCA: isCA,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func validBundle(t *testing.T) *bundle.Bundle {
	return &bundle.Bundle{
		RootCerts:        append(rootPEM(t, true), rootPEM(t, true)...),
		Token:            "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
		DiscoveryAddress: "vmesh.example:15012",
		TrustDomain:      "cluster.local",
		Namespace:        "shop",
		ServiceAccount:   "cart",
		WorkloadGroup:    "cart-vms",
		Labels:           map[string]string{"app": "cart", "version": "v1"},
		TokenExpiry:      time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vm1")
	want := validBundle(t)
	if err := want.Write(dir); err != nil {
		t.Fatal(err)
	}
	got, err := bundle.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	st, err := os.Stat(filepath.Join(dir, bundle.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("token mode = %o, want 600", st.Mode().Perm())
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, bundle.ConfigFile))
	for _, want := range []string{"apiVersion: vmesh.io/v1alpha1", "kind: VMBundle", "discoveryAddress: vmesh.example:15012", "workloadGroup: cart-vms"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("%s lacks %q:\n%s", bundle.ConfigFile, want, cfg)
		}
	}
	if strings.Contains(string(cfg), want.Token) {
		t.Error("the token leaked into bundle.yaml")
	}
}

func TestValidateNamesEveryProblem(t *testing.T) {
	b := validBundle(t)
	b.DiscoveryAddress = "no-port"
	b.Namespace = ""
	b.Token = ""
	b.RootCerts = rootPEM(t, false)
	err := b.Validate()
	if err == nil {
		t.Fatal("invalid bundle accepted")
	}
	for _, want := range []string{"discoveryAddress", "namespace", "token", "not a CA"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if err := b.Write(t.TempDir()); err == nil {
		t.Fatal("Write accepted an invalid bundle")
	}
}

func TestReadRejectsUnknownFieldsAndWrongKind(t *testing.T) {
	dir := t.TempDir()
	if err := validBundle(t).Write(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, bundle.ConfigFile)
	orig, _ := os.ReadFile(path)
	for _, tc := range []struct{ name, content, want string }{
		{"unknown field", string(orig) + "extra: 1\n", "extra"},
		{"wrong kind", strings.Replace(string(orig), "kind: VMBundle", "kind: Other", 1), "kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := bundle.Read(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestParseLabels(t *testing.T) {
	got, err := bundle.ParseLabels("app=cart, version=v1,empty=")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"app": "cart", "version": "v1", "empty": ""}, got); diff != "" {
		t.Fatal(diff)
	}
	if s := bundle.FormatLabels(got); s != "app=cart,empty=,version=v1" {
		t.Fatalf("FormatLabels = %q", s)
	}
	for _, bad := range []string{"novalue", "=v", "a=1,a=2"} {
		if _, err := bundle.ParseLabels(bad); err == nil {
			t.Errorf("ParseLabels(%q) accepted", bad)
		}
	}
	if m, err := bundle.ParseLabels(""); err != nil || len(m) != 0 {
		t.Fatalf("empty labels = %v, %v", m, err)
	}
}
