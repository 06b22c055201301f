// Command schemagen writes gatewayapi/schemas.json: the OpenAPI v3 schema
// (descriptions left out) of every served version of the Gateway API kinds
// vmesh decodes, from the CRDs of the sigs.k8s.io/gateway-api module that
// go.mod names (the standard channel; a version only the experimental
// channel serves takes the experimental schema). Run by `go generate
// ./gatewayapi` (the module must be in the module cache: go mod download).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// kinds are the CRD files (plural names) of the kinds vmesh decodes.
var kinds = []string{"gatewayclasses", "gateways", "httproutes", "grpcroutes", "tcproutes", "tlsroutes", "referencegrants"}

type crd struct {
	Spec struct {
		Group string `yaml:"group"`
		Names struct {
			Kind string `yaml:"kind"`
		} `yaml:"names"`
		Versions []struct {
			Name   string `yaml:"name"`
			Served bool   `yaml:"served"`
			Schema struct {
				OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
			} `yaml:"schema"`
		} `yaml:"versions"`
	} `yaml:"spec"`
}

// Version is one served version of a kind in schemas.json.
type Version struct {
	Kind    string `json:"kind"`
	Group   string `json:"group"`
	Version string `json:"version"`
	Channel string `json:"channel"`
	// Schema indexes Schemas.
	Schema int `json:"schema"`
}

// File is schemas.json.
type File struct {
	Module   string           `json:"module"`
	Versions []Version        `json:"versions"`
	Schemas  []map[string]any `json:"schemas"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run() error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}}@{{.Version}} {{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		return fmt.Errorf("go list: %w", err)
	}
	mod, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	f := File{Module: mod}
	index := map[string]int{}
	for _, plural := range kinds {
		served := map[string]bool{}
		for _, channel := range []string{"standard", "experimental"} {
			data, err := os.ReadFile(filepath.Join(dir, "config", "crd", channel, "gateway.networking.k8s.io_"+plural+".yaml"))
			if err != nil {
				return err
			}
			var c crd
			if err := yaml.Unmarshal(data, &c); err != nil {
				return fmt.Errorf("%s: %w", plural, err)
			}
			for _, v := range c.Spec.Versions {
				if !v.Served || served[v.Name] {
					continue
				}
				served[v.Name] = true
				s := strip(v.Schema.OpenAPIV3Schema).(map[string]any)
				b, err := json.Marshal(s)
				if err != nil {
					return err
				}
				i, ok := index[string(b)]
				if !ok {
					i = len(f.Schemas)
					index[string(b)] = i
					f.Schemas = append(f.Schemas, s)
				}
				f.Versions = append(f.Versions, Version{Kind: c.Spec.Names.Kind, Group: c.Spec.Group, Version: v.Name, Channel: channel, Schema: i})
			}
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(f); err != nil {
		return err
	}
	return os.WriteFile("schemas.json", buf.Bytes(), 0o644)
}

// strip drops the descriptions.
func strip(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			if k == "description" {
				if _, isText := e.(string); isText {
					continue
				}
			}
			out[k] = strip(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = strip(e)
		}
		return out
	}
	return v
}
