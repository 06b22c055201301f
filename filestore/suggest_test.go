package filestore

import (
	"strings"
	"testing"
)

// An unknown field names the field the writer most likely meant: the same
// name in another case, or a close typo; a name close to nothing gets no
// guess.
func TestUnknownFieldDidYouMean(t *testing.T) {
	vs := func(retry string) string {
		return "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: shop}\nspec:\n  hosts: [r.shop.internal]\n  http:\n  - route:\n    - destination: {host: r.shop.internal}\n    retries: {attempts: 2, " + retry + ": 5xx}\n"
	}
	cases := []struct {
		name, doc, want string
	}{
		{name: "case only", doc: vs("retryon"), want: `case.yaml:9: VirtualService/shop/r: http[0].retries.retryon: unknown field "retryon" in HTTPRetry (did you mean "retryOn"?)`},
		{name: "typo", doc: vs("retyOn"), want: `unknown field "retyOn" in HTTPRetry (did you mean "retryOn"?)`},
		{name: "nothing close", doc: vs("backoffJitter"), want: `unknown field "backoffJitter" in HTTPRetry`},
		{name: "plural", doc: "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se}\nspec:\n  hosts: [a.b]\n  resolution: NONE\n  endpoint: []\n", want: `unknown field "endpoint" in ServiceEntry (did you mean "endpoints"?)`},
		{name: "metadata", doc: "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespce: a}\nspec: {hosts: [a.b], resolution: NONE}\n", want: `unknown field "namespce" (did you mean "namespace"?)`},
		{name: "top level", doc: "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se}\nspecs: {hosts: [a.b]}\n", want: `unknown field "specs" (did you mean "spec"?)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs := Decode("case.yaml", []byte(c.doc))
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
				if strings.HasSuffix(e.Error(), c.want) || e.Error() == c.want {
					if c.name == "nothing close" && strings.Contains(e.Error(), "did you mean") {
						t.Errorf("a guess for a name close to nothing: %s", e.Error())
					}
					return
				}
			}
			t.Errorf("want an error ending %q; got:\n%s", c.want, strings.Join(got, "\n"))
		})
	}
}

func TestMeshConfigUnknownFieldDidYouMean(t *testing.T) {
	if got := didYouMean("conectTimeout", []string{"connectTimeout", "trustDomain"}); got != ` (did you mean "connectTimeout"?)` {
		t.Errorf("didYouMean(conectTimeout) = %q", got)
	}
	if got := didYouMean("zz", []string{"connectTimeout", "trustDomain"}); got != "" {
		t.Errorf("didYouMean(zz) = %q, want no guess", got)
	}
}

// A file's problems are listed by line, though a document's validation
// runs after its decoding.
func TestDecodeErrorsSortedByLine(t *testing.T) {
	doc := "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: r, namespace: shop}\nspec:\n  ports: [{number: 99999, name: http}]\n  hosts: []\n  resolution: DNS\n"
	_, errs := Decode("case.yaml", []byte(doc))
	if len(errs) < 2 {
		t.Fatalf("want two problems, got %v", errs)
	}
	for i := 1; i < len(errs); i++ {
		if errs[i].Line < errs[i-1].Line {
			t.Errorf("problems out of line order:\n%v\n%v", errs[i-1], errs[i])
		}
	}
}
