package filestore_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

// The warning half of the differential test against Istio: on every corpus
// document both Istio and vmesh accept, each warning Istio's validation
// gave (verdicts.json "warnings") must be one vmesh gives with Istio's
// analyzer code for it, as many times: IST0130 for an unreachable
// VirtualService rule, IST0131 for an ineffective match, IST0133 for every
// other one. A difference in either direction fails the test unless the
// reviewed list tools/istio-oracle/warning-exceptions.txt names the
// document and code; an entry that no longer differs fails it too.

// The codes Istio's analyzer gives its validation warnings, in order.
var istioWarningCodes = []string{store.CodeUnreachableRule, store.CodeIneffectiveMatch, store.CodeSchemaWarning}

var (
	// "virtualService rule #1 match #0 ... is not used (duplicate/overlapping match in rule #0 ...)"
	istioIneffectiveRE = regexp.MustCompile(`^virtualService rule .+ match .+ is not used \(duplicate/overlapping match in rule `)
	// "virtualService rule #1 not used (only the last rule can have no matches)"
	istioUnreachableRE = regexp.MustCompile(`^virtualService rule .+ not used \(`)
)

// istioWarningCode is the analyzer code of one of Istio's validation
// warnings (pkg/config/analysis/analyzers/schema/validation.go).
func istioWarningCode(text string) string {
	switch {
	case istioIneffectiveRE.MatchString(text):
		return store.CodeIneffectiveMatch
	case istioUnreachableRE.MatchString(text):
		return store.CodeUnreachableRule
	}
	return store.CodeSchemaWarning
}

type warningException struct {
	reason string
	line   int
}

// loadWarningExceptions reads "<document id> <code> <reason>" lines; blank
// lines and lines starting with # are comments.
func loadWarningExceptions(t *testing.T) map[[2]string]warningException {
	t.Helper()
	f, err := os.Open(filepath.Join(oracleDir, "warning-exceptions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[[2]string]warningException{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.SplitN(line, " ", 3)
		if len(fields) < 3 || !isIstioWarningCode(fields[1]) || strings.TrimSpace(fields[2]) == "" {
			t.Fatalf("warning-exceptions.txt:%d: want \"<document id> %s <reason>\", got %q", n, strings.Join(istioWarningCodes, "|"), line)
		}
		key := [2]string{fields[0], fields[1]}
		if _, dup := out[key]; dup {
			t.Fatalf("warning-exceptions.txt:%d: %s %s is listed twice", n, fields[0], fields[1])
		}
		out[key] = warningException{reason: strings.TrimSpace(fields[2]), line: n}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func isIstioWarningCode(c string) bool {
	for _, w := range istioWarningCodes {
		if c == w {
			return true
		}
	}
	return false
}

// vmeshWarnings loads one corpus document the way `vmesh validate` reads a
// file; it reports whether vmesh accepts it, and its warnings and infos,
// all of them (a file reports only its first MaxProblems).
func vmeshWarnings(t *testing.T, id string) (bool, []store.ConfigError) {
	t.Helper()
	path := filepath.Join(oracleDir, "corpus", filepath.FromSlash(id))
	if accepted, _ := vmeshVerdict(t, id); !accepted {
		return false, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return true, filestore.DecodeFile(path, data, filestore.Limits{MaxProblems: 1 << 16}).Warnings
}

func TestIstioWarningParity(t *testing.T) {
	exceptions := loadWarningExceptions(t)
	used := map[[2]string]bool{}
	var compared, agree, listed, istioWarned int
	var failures []string
	for _, v := range loadVerdicts(t) {
		accepted, ws := vmeshWarnings(t, v.ID)
		if !v.Accepted || !accepted {
			continue
		}
		compared++
		if len(v.Warnings) > 0 {
			istioWarned++
		}
		want := map[string][]string{}
		for _, text := range v.Warnings {
			c := istioWarningCode(text)
			want[c] = append(want[c], text)
		}
		got := map[string][]string{}
		for _, w := range ws {
			if isIstioWarningCode(w.Code) {
				got[w.Code] = append(got[w.Code], w.Field)
			}
		}
		differs, excepted := false, false
		for _, code := range istioWarningCodes {
			if len(want[code]) == len(got[code]) {
				continue
			}
			differs = true
			key := [2]string{v.ID, code}
			if _, ok := exceptions[key]; ok {
				used[key] = true
				excepted = true
				continue
			}
			failures = append(failures, fmt.Sprintf("%s (%s %s): %s: Istio %d %q, vmesh %d at %v",
				v.ID, v.Kind, v.Name, code, len(want[code]), want[code], len(got[code]), got[code]))
		}
		switch {
		case !differs:
			agree++
		case excepted:
			listed++
		}
	}
	t.Logf("Istio warning parity: %d documents both accept (%d with Istio warnings), %d agree on %s, %d differ as warning-exceptions.txt lists",
		compared, istioWarned, agree, strings.Join(istioWarningCodes, "/"), listed)
	sort.Strings(failures)
	for _, f := range failures {
		t.Errorf("warnings differ from Istio's: %s", f)
	}
	var stale []string
	for key, ex := range exceptions {
		if !used[key] {
			stale = append(stale, fmt.Sprintf("warning-exceptions.txt:%d: %s %s no longer differs; remove it", ex.line, key[0], key[1]))
		}
	}
	sort.Strings(stale)
	for _, s := range stale {
		t.Error(s)
	}
}

// Istio's warning texts map to their analyzer codes, rule names with
// spaces included.
func TestIstioWarningCodeOfText(t *testing.T) {
	for text, want := range map[string]string{
		`virtualService rule #1 not used (only the last rule can have no matches)`:                                                        store.CodeUnreachableRule,
		`virtualService rule "my rule" not used (all matches used by prior rules)`:                                                        store.CodeUnreachableRule,
		`virtualService rule #0 match #1 is not used (duplicate/overlapping match in rule #0)`:                                            store.CodeIneffectiveMatch,
		`virtualService rule "a b" match "c d" of prefix /x is not used (duplicate/overlapping match in rule "a b" of prefix / on "a b")`: store.CodeIneffectiveMatch,
		`workload selector specified without labels`:                                                                                      store.CodeSchemaWarning,
	} {
		if got := istioWarningCode(text); got != want {
			t.Errorf("%q: %s, want %s", text, got, want)
		}
	}
}
