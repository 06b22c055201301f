package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStripExpectation(t *testing.T) {
	doc := []byte("_err: \"Cannot set serviceAccounts\"\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n")
	body, expect := stripExpectation(doc)
	if expect != "Cannot set serviceAccounts" || strings.Contains(string(body), "_err") || !strings.HasPrefix(string(body), "apiVersion:") {
		t.Errorf("stripExpectation = %q, %q", body, expect)
	}
}

func TestSplitYAMLDropsEmptyDocuments(t *testing.T) {
	docs, err := splitYAML([]byte("---\n# only a comment\n---\nkind: A\n---\n\n---\nkind: B\n"))
	if err != nil || len(docs) != 2 {
		t.Fatalf("splitYAML = %d documents, %v", len(docs), err)
	}
}

func TestHeader(t *testing.T) {
	src, idx, expect := header([]byte("# source: pkg/config/validation/testdata/crds/authz-invalid.yaml document 3\n# Istio's test expects: bad\napiVersion: x\n"))
	if src != "pkg/config/validation/testdata/crds/authz-invalid.yaml" || idx != 3 || expect != "bad" {
		t.Errorf("header = %q %d %q", src, idx, expect)
	}
}

// protojson writes 64-bit integers as strings; the CRD schema wants numbers.
func TestInt64sAsNumbers(t *testing.T) {
	spec := json.RawMessage(`{"host":"a","trafficPolicy":{"loadBalancer":{"consistentHash":{"minimumRingSize":"1024","httpHeaderName":"x"}}}}`)
	v, err := int64sAsNumbers("networking.istio.io", "DestinationRule", spec)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	if !strings.Contains(string(b), `"minimumRingSize":1024`) || !strings.Contains(string(b), `"httpHeaderName":"x"`) {
		t.Errorf("int64sAsNumbers = %s", b)
	}
}

func TestStableText(t *testing.T) {
	if got := stableText("port:  number:7  protocol:\"http\""); got != `port: number:7 protocol:"http"` {
		t.Errorf("stableText = %q", got)
	}
}

func TestCheckOracle(t *testing.T) {
	if err := checkOracle([]Verdict{{ID: "a", Expect: "bad", Accepted: true}}); err == nil {
		t.Error("an accepted document with an _err passed")
	}
	if err := checkOracle([]Verdict{{ID: "b", Source: "pkg/config/validation/testdata/crds/x-valid.yaml"}}); err == nil {
		t.Error("a rejected *-valid.yaml document passed")
	}
	if err := checkOracle([]Verdict{{ID: "c", Source: "pkg/config/validation/testdata/crds/x-invalid.yaml", Expect: "bad"}}); err != nil {
		t.Error(err)
	}
}
