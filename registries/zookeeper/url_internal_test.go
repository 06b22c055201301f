package zookeeper

import (
	"maps"
	"net/url"
	"testing"
)

// TestFirstValuesIsParseQuery checks firstValues against the standard
// library's reading of the same queries, first value of each key.
func TestFirstValuesIsParseQuery(t *testing.T) {
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
	} {
		want := map[string]string{}
		parsed, _ := url.ParseQuery(q)
		for k, v := range parsed {
			want[k] = v[0]
		}
		if got := firstValues(q); !maps.Equal(got, want) {
			t.Errorf("firstValues(%q) = %v, ParseQuery's first values %v", q, got, want)
		}
	}
}
