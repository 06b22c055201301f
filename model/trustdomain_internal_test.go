package model

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
)

// The principals of AuthorizationPolicies are rewritten as Istio's
// Bundle.ReplaceTrustDomainAliases does: the cases of Istio's own
// TestReplaceTrustDomainAliases (pilot/pkg/security/trustdomain), each
// bundle NewBundle(td, aliases) as a Mesh's trust domain and aliases.
func TestReplaceTrustDomainsAsIstio(t *testing.T) {
	for _, tc := range []struct {
		name       string
		td         string
		aliases    []string
		principals []string
		want       []string
	}{
		{"no aliases", "cluster.local", nil, []string{"cluster.local/ns/foo/sa/bar"}, []string{"cluster.local/ns/foo/sa/bar"}},
		{"principal *", "cluster.local", nil, []string{"*"}, []string{"*"}},
		{"principal with * trust domain", "cluster.local", nil, []string{"*/ns/foo/sa/bar"}, []string{"*/ns/foo/sa/bar"}},
		{"one alias, one principal", "td2", []string{"td1"}, []string{"td1/ns/foo/sa/bar"}, []string{"td2/ns/foo/sa/bar", "td1/ns/foo/sa/bar"}},
		{"one alias, two principals", "td1", []string{"cluster.local"}, []string{"cluster.local/ns/foo/sa/bar", "cluster.local/ns/yyy/sa/zzz"},
			[]string{"td1/ns/foo/sa/bar", "cluster.local/ns/foo/sa/bar", "td1/ns/yyy/sa/zzz", "cluster.local/ns/yyy/sa/zzz"}},
		{"one alias, * principals as they are", "td1", []string{"cluster.local"}, []string{"*/ns/foo/sa/bar", "*sa/zzz", "*"},
			[]string{"*/ns/foo/sa/bar", "*sa/zzz", "*"}},
		{"two aliases, two principals", "td2", []string{"td1", "cluster.local"}, []string{"cluster.local/ns/foo/sa/bar", "td1/ns/yyy/sa/zzz"},
			[]string{"td2/ns/foo/sa/bar", "td1/ns/foo/sa/bar", "cluster.local/ns/foo/sa/bar", "td2/ns/yyy/sa/zzz", "td1/ns/yyy/sa/zzz", "cluster.local/ns/yyy/sa/zzz"}},
		{"two aliases, * prefix in the trust domain", "td2", []string{"foo-td1", "cluster.local"}, []string{"*-td1/ns/foo/sa/bar"},
			[]string{"td2/ns/foo/sa/bar", "*-td1/ns/foo/sa/bar", "cluster.local/ns/foo/sa/bar"}},
		{"no trust domain matches", "td1", []string{"td2"}, []string{"some-td/ns/foo/sa/bar"}, []string{"some-td/ns/foo/sa/bar"}},
		{"matches one alias", "td1", []string{"td2", "some-td"}, []string{"some-td/ns/foo/sa/bar"}, []string{"td1/ns/foo/sa/bar", "td2/ns/foo/sa/bar", "some-td/ns/foo/sa/bar"}},
		{"one of two matches", "new-td", []string{"td2", "td3"}, []string{"td1/ns/some-ns/sa/some-sa", "td2/ns/foo/sa/bar"},
			[]string{"td1/ns/some-ns/sa/some-sa", "new-td/ns/foo/sa/bar", "td2/ns/foo/sa/bar", "td3/ns/foo/sa/bar"}},
		{"empty trust domain", "new-td", []string{"td2", "td3"}, []string{"/ns/some-ns/sa/some-sa"}, []string{"/ns/some-ns/sa/some-sa"}},
		{"no duplicates for a prefix", "new-td", []string{"old-td"}, []string{"*-td/ns/some-ns/sa/some-sa"}, []string{"*-td/ns/some-ns/sa/some-sa"}},
		// Not in Istio's table: cluster.local stands for the local trust
		// domain when it is not in the bundle.
		{"cluster.local under another trust domain", "example.org", nil, []string{"cluster.local/ns/foo/sa/bar"}, []string{"example.org/ns/foo/sa/bar"}},
	} {
		m := Mesh{TrustDomain: tc.td, TrustDomainAliases: strings.Join(tc.aliases, ",")}
		if got := replaceTrustDomains(tc.principals, m.trustDomainBundle()); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// migrateTrustDomain rewrites every principal field of a rule (source
// principals and notPrincipals, when source.principal) and expands
// trustDomains (source and when source.trustDomain), without touching the
// rules it is given; rules it does not change are returned as they are.
func TestMigrateTrustDomain(t *testing.T) {
	m := Mesh{TrustDomain: "new-td", TrustDomainAliases: "old-td"}
	rule := &security.Rule{
		From: []*security.Rule_From{{Source: &security.Source{
			Principals: []string{"old-td/ns/a/sa/b"}, NotPrincipals: []string{"cluster.local/ns/x/sa/y"},
			TrustDomains: []string{"old-td", "elsewhere"},
		}}},
		When: []*security.Condition{{Key: "source.principal", Values: []string{"new-td/ns/c/sa/d"}}, {Key: "source.trustDomain", NotValues: []string{"new-td"}},
			{Key: "source.namespace", Values: []string{"cluster.local"}}},
	}
	untouched := &security.Rule{From: []*security.Rule_From{{Source: &security.Source{Principals: []string{"other/ns/a/sa/b"}}}}}
	before := proto.Clone(rule)
	rules := []*security.Rule{rule, untouched}
	got := m.migrateTrustDomain(rules)
	if !proto.Equal(rule, before) || rules[0] != rule {
		t.Fatal("the rules given were modified")
	}
	if got[1] != untouched {
		t.Error("an unchanged rule was copied")
	}
	s := got[0].GetFrom()[0].GetSource()
	for _, c := range []struct {
		field     string
		got, want []string
	}{
		{"principals", s.GetPrincipals(), []string{"new-td/ns/a/sa/b", "old-td/ns/a/sa/b"}},
		{"notPrincipals", s.GetNotPrincipals(), []string{"new-td/ns/x/sa/y", "old-td/ns/x/sa/y"}},
		{"trustDomains", s.GetTrustDomains(), []string{"new-td", "old-td", "elsewhere"}},
		{"when source.principal", got[0].GetWhen()[0].GetValues(), []string{"new-td/ns/c/sa/d", "old-td/ns/c/sa/d"}},
		{"when source.trustDomain", got[0].GetWhen()[1].GetNotValues(), []string{"new-td", "old-td"}},
		{"when source.namespace", got[0].GetWhen()[2].GetValues(), []string{"cluster.local"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %q, want %q", c.field, c.got, c.want)
		}
	}
	if d := DefaultMesh(); &d.migrateTrustDomain(rules)[0] != &rules[0] {
		t.Error("the default mesh (cluster.local, no aliases) copied rules it leaves as they are")
	}
}

// A client accepts a server's SPIFFE ID in each trust domain alias too, as
// Istio's ExpandWithTrustDomains: every spiffe://TD/ns/NS/sa/SA identity
// (the ServiceEntry's subjectAltNames and the endpoints' service accounts)
// is listed once more per alias; other names are kept as they are.
func TestServiceIdentitiesWithAliases(t *testing.T) {
	svc := &Service{Namespace: "shop", SubjectAltNames: []string{"spiffe://cluster.local/ns/shop/sa/legacy", "db.example.com"},
		Endpoints: []*Endpoint{{ServiceAccount: "reviews"}}}
	s := &Snapshot{Mesh: Mesh{TrustDomain: "cluster.local", TrustDomainAliases: "old-td"}}
	want := []string{"db.example.com", "spiffe://cluster.local/ns/shop/sa/legacy", "spiffe://cluster.local/ns/shop/sa/reviews",
		"spiffe://old-td/ns/shop/sa/legacy", "spiffe://old-td/ns/shop/sa/reviews"}
	if got := s.ServiceIdentities(svc); !slices.Equal(got, want) {
		t.Errorf("identities %q, want %q", got, want)
	}
	s.Mesh.TrustDomainAliases = ""
	if got := s.ServiceIdentities(svc); len(got) != 3 {
		t.Errorf("without aliases: %q", got)
	}
}
