package bundle_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/ca/bundle"
)

// TestFailoverAddresses: the other replicas' addresses survive a write and
// a read, in order after the discovery address, and each must be host:port.
func TestFailoverAddresses(t *testing.T) {
	b := validBundle(t)
	b.FailoverAddresses = []string{"cp-2.example:15012", "cp-3.example:15012"}
	dir := filepath.Join(t.TempDir(), "vm")
	if err := b.Write(dir); err != nil {
		t.Fatal(err)
	}
	got, err := bundle.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"vmesh.example:15012", "cp-2.example:15012", "cp-3.example:15012"}; !slices.Equal(got.DiscoveryAddresses(), want) {
		t.Fatalf("addresses %q, want %q", got.DiscoveryAddresses(), want)
	}
	b.FailoverAddresses = []string{"cp-2"}
	if err := b.Validate(); err == nil || !strings.Contains(err.Error(), `failoverAddresses: "cp-2" is not host:port`) {
		t.Fatalf("a failover address without a port: %v", err)
	}
}
