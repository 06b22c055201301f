package ca_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/bundle"
)

func TestWriteVMBundleHoldsWhatAVMNeedsToJoin(t *testing.T) {
	c, _, _ := newTestCA(t, nil)
	dir := t.TempDir()
	_, err := c.WriteVMBundle(dir, ca.VMBundleRequest{
		Namespace: "shop", ServiceAccount: "cart", WorkloadGroup: "cart-vms",
		Labels: map[string]string{"app": "cart"}, DiscoveryAddress: "10.0.0.1:15012", TokenTTL: 6 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Read(dir) // what the agent does on the VM
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.RootCerts, c.TrustBundle().PEM()) {
		t.Fatal("bundle roots differ from the CA's trust bundle")
	}
	if b.DiscoveryAddress != "10.0.0.1:15012" || b.Namespace != "shop" || b.ServiceAccount != "cart" ||
		b.WorkloadGroup != "cart-vms" || b.Labels["app"] != "cart" || b.TrustDomain != "cluster.local" {
		t.Fatalf("bundle = %+v", b)
	}
	claims, err := c.VerifyToken(b.Token)
	if err != nil {
		t.Fatalf("bundle token rejected by the CA: %v", err)
	}
	if claims.Identity != testID || claims.WorkloadGroup != "cart-vms" {
		t.Fatalf("token claims = %+v", claims)
	}
	if !claims.Expiry.Equal(b.TokenExpiry) || claims.Expiry.Sub(claims.NotBefore) != 6*time.Hour {
		t.Fatalf("token expiry %s, bundle says %s", claims.Expiry, b.TokenExpiry)
	}
	if _, err := c.NewVMBundle(ca.VMBundleRequest{Namespace: "shop", ServiceAccount: "cart"}); err == nil {
		t.Fatal("bundle without a discovery address accepted")
	}
}
