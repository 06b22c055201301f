package main

import (
	"strings"
	"testing"
)

const stream = `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":0.1}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: boom\n"}
{"Action":"fail","Package":"p","Test":"TestB","Elapsed":0.2}
{"Action":"output","Package":"p","Test":"TestC","Output":"    testenv.go:61: testenv: consul binary not found\n"}
{"Action":"output","Package":"p","Test":"TestC","Output":"--- SKIP: TestC (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.3s\n"}
{"Action":"fail","Package":"p","Elapsed":0.3}
{"Action":"output","Package":"q","Output":"ok  \tq\t0.1s\n"}
{"Action":"pass","Package":"q","Elapsed":0.1}
`

func TestSummary(t *testing.T) {
	s := newSummary()
	var out strings.Builder
	if err := s.read(strings.NewReader(stream), &out); err != nil {
		t.Fatal(err)
	}
	if got := s.report(false); !strings.HasSuffix(got, "1 passed, 1 failed, 1 skipped") ||
		!strings.Contains(got, "p TestC: testenv.go:61: testenv: consul binary not found") {
		t.Errorf("report:\n%s", got)
	}
	if !strings.Contains(out.String(), "--- FAIL: p TestB") || !strings.Contains(out.String(), "boom") ||
		!strings.Contains(out.String(), "ok  \tq") {
		t.Errorf("output:\n%s", out.String())
	}
	if s.ok(false) {
		t.Error("a failed test must fail the run")
	}
}

func TestSkipFailsUnderCI(t *testing.T) {
	s := newSummary()
	in := `{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"skip","Package":"p","Test":"TestC"}
`
	if err := s.read(strings.NewReader(in), &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if !s.ok(false) || s.ok(true) {
		t.Errorf("ok(false)=%v ok(true)=%v; want true, false", s.ok(false), s.ok(true))
	}
}

func TestBuildFailure(t *testing.T) {
	s := newSummary()
	var out strings.Builder
	in := "# p\n./a.go:3:1: syntax error\n" + `{"Action":"output","Package":"p","Output":"FAIL\tp [build failed]\n"}
{"Action":"fail","Package":"p"}
`
	if err := s.read(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	if s.ok(false) || !strings.Contains(out.String(), "syntax error") || !strings.Contains(s.report(false), "1 package(s) failed") {
		t.Errorf("build failure not reported: ok=%v\n%s\n%s", s.ok(false), out.String(), s.report(false))
	}
}
