package zookeeper

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"testing"

	"github.com/vmesh/vmesh/registries/adapter"
)

// TestReadQueryIsParseQuery checks readQuery against the standard
// library's reading of the same queries: the first value of each
// parameter vmesh reads, and the first values that are labels
// (adapter.Labels).
func TestReadQueryIsParseQuery(t *testing.T) {
	for _, q := range []string{
		"",
		"interface=com.example.Greeter&version=1.0.0&group=",
		"a=1&a=2&b=3",
		"methods=sayHello%2CsayBye&application=demo+app",
		"bad=%zz&good=1",
		"%zz=1&k=v",
		"semi=1;x=2&ok=3",
		"&&k=v&&",
		"novalue&empty=&k=a=b",
		"plus+key=space+value&pct%3D=%26",
		"group=&group=pay&default.group=base&version=1&version=2",
		"side=not+a+label&side=provider&interface=A&interface=B",
		"weight=x&weight=5&category=providers&category=consumers&enabled=true&enabled=false",
		"timestamp=1&default.version=2.0&application=%7Bbad%7D&application=ok",
	} {
		parsed, _ := url.ParseQuery(q)
		first := map[string]string{}
		for k, v := range parsed {
			first[k] = v[0]
		}
		got := readQuery(q)
		for i, name := range paramNames {
			if got.param[i] != first[name] {
				t.Errorf("readQuery(%q): %s = %q, ParseQuery's first value %q", q, name, got.param[i], first[name])
			}
		}
		if want := adapter.Labels(nil, first); !maps.Equal(got.labels, want) {
			t.Errorf("readQuery(%q) labels %v, adapter.Labels of ParseQuery's first values %v", q, got.labels, want)
		}
	}
}

// TestQueryUnescapeIsTheStandardLibrarys checks queryUnescape against
// url.QueryUnescape: the same string or the same error, on hand-picked
// cases and on 20,000 strings drawn (seeded) from escapes' alphabet.
func TestQueryUnescapeIsTheStandardLibrarys(t *testing.T) {
	cases := []string{"", "plain", "a+b", "%41", "%4", "%", "x%", "%zz", "%4g", "%%41", "a%2Cb%3d%3D+c", "%C3%A9t%C3%A9",
		"dubbo%3A%2F%2F10.0.0.1%3A20880%2Fcom.example.Greeter%3Fapplication%3Ddemo%26interface%3Dcom.example.Greeter", "trailing%2", "+%+"}
	rng := rand.New(rand.NewPCG(20, 1))
	const alphabet = "%+aF9gz=&/ \xff"
	for range 20000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		want, wantErr := url.QueryUnescape(s)
		got, err := queryUnescape(s)
		if got != want || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("queryUnescape(%q) = %q, %v; url.QueryUnescape: %q, %v", s, got, err, want, wantErr)
		}
	}
}
