package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	kubeyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// corpusRoots are the folders of Istio's module whose YAML is the corpus;
// under pilot and tests/integration only testdata folders count.
var corpusRoots = []struct {
	dir          string
	testdataOnly bool
}{
	{"pkg/config/validation/testdata", false},
	{"pilot", true},
	{"tests/integration", true},
	{"samples", false},
	{"tests/testdata/config", false},
}

// vmeshKinds are the group and kinds vmesh implements; other documents are
// not part of the corpus.
var vmeshKinds = map[string]string{
	"ServiceEntry": "networking.istio.io", "WorkloadEntry": "networking.istio.io", "WorkloadGroup": "networking.istio.io",
	"VirtualService": "networking.istio.io", "DestinationRule": "networking.istio.io", "Sidecar": "networking.istio.io",
	"Gateway": "networking.istio.io", "PeerAuthentication": "security.istio.io", "AuthorizationPolicy": "security.istio.io",
	"RequestAuthentication": "security.istio.io",
}

// collectFiles copies every document of a vmesh kind from Istio's YAML files
// into dst, one file per document named <source path without extension>.<index>.yaml
// (index counts the non-empty documents of the source file from 0). Files
// that are Go or Helm templates are skipped, and so are repeats of a document
// already taken. Each file starts with a comment naming its source; a
// document's "_err" key (the expected error of Istio's CRD tests) becomes a
// comment.
func collectFiles(src, dst string) (int, error) {
	seen := map[string]bool{}
	n := 0
	for _, root := range corpusRoots {
		var files []string
		err := filepath.WalkDir(filepath.Join(src, root.dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(src, path)
			if root.testdataOnly && !strings.Contains(filepath.ToSlash(rel), "/testdata/") {
				return nil
			}
			if ext := filepath.Ext(path); ext == ".yaml" || ext == ".yml" {
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		slices.Sort(files)
		for _, rel := range files {
			data, err := os.ReadFile(filepath.Join(src, rel))
			if err != nil {
				return n, err
			}
			if bytes.Contains(data, []byte("{{")) {
				continue // a template, not config
			}
			docs, err := splitYAML(data)
			if err != nil {
				continue // not YAML Istio's reader can split
			}
			for i, doc := range docs {
				body, expect := stripExpectation(doc)
				var m map[string]any
				if yaml.Unmarshal(body, &m) != nil || m == nil {
					continue
				}
				kind, _ := m["kind"].(string)
				api, _ := m["apiVersion"].(string)
				group, _, _ := strings.Cut(api, "/")
				if vmeshKinds[kind] == "" || vmeshKinds[kind] != group {
					continue
				}
				key, _ := json.Marshal(m)
				if seen[string(key)] {
					continue
				}
				seen[string(key)] = true
				name := strings.TrimSuffix(rel, filepath.Ext(rel)) + fmt.Sprintf(".%d.yaml", i)
				var out bytes.Buffer
				fmt.Fprintf(&out, "# source: %s document %d\n", filepath.ToSlash(rel), i)
				if expect != "" {
					fmt.Fprintf(&out, "# Istio's test expects: %s\n", expect)
				}
				out.Write(body)
				if err := writeFile(filepath.Join(dst, name), out.Bytes()); err != nil {
					return n, err
				}
				n++
			}
		}
	}
	return n, nil
}

// splitYAML splits a multi-document file the way istioctl validate reads
// it, dropping empty documents.
func splitYAML(data []byte) ([][]byte, error) {
	r := kubeyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		docs = append(docs, doc)
	}
}

// stripComments drops comment lines and document separators (the reader
// leaves the first document's leading "---").
func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

// stripExpectation removes a top-level "_err: ..." line and returns its value.
func stripExpectation(doc []byte) ([]byte, string) {
	var out []byte
	expect := ""
	for _, l := range bytes.SplitAfter(doc, []byte("\n")) {
		if v, ok := bytes.CutPrefix(l, []byte("_err:")); ok {
			expect = strings.Trim(strings.TrimSpace(string(v)), `"'`)
			continue
		}
		out = append(out, l...)
	}
	return out, expect
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
