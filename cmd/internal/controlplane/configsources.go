package controlplane

import (
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vmesh/vmesh/filestore/mcpsource"
	"github.com/vmesh/vmesh/store"
)

// addConfigSources starts a config-over-xDS source (filestore/mcpsource)
// for each xds://HOST:PORT entry of --mesh-config's configSources, as
// istiod does; the rest of the entries, and what of an entry's
// tlsSettings does not apply, are VM1011 warnings returned with the
// file's lines.
func (cp *ControlPlane) addConfigSources() ([]store.ConfigError, error) {
	mc := cp.meshConfig
	if len(mc.GetConfigSources()) == 0 {
		return nil, nil
	}
	file := cp.cfg.MeshConfig
	lines := configSourceLines(file)
	var warns []store.ConfigError
	for i, cs := range mc.GetConfigSources() {
		field := fmt.Sprintf("configSources[%d]", i)
		at := func(w store.ConfigError) store.ConfigError {
			w.File, w.Line = file, lines[i]
			return w
		}
		if !strings.HasPrefix(cs.GetAddress(), "xds://") {
			warns = append(warns, at(store.ConfigError{Field: field + ".address", Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
				Message: fmt.Sprintf("config source %s is not applied: vmesh reads xds://HOST:PORT config sources (files: --config-dir or --git-repo)", store.Quote(cs.GetAddress()))}))
			continue
		}
		if _, err := mcpsource.Host(cs.GetAddress()); err != nil {
			return nil, fmt.Errorf("mesh config %s: %s.address: %w", file, field, err)
		}
		if len(cs.GetSubscribedResources()) > 0 {
			warns = append(warns, at(store.ConfigError{Field: field + ".subscribedResources", Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied,
				Message: "subscribedResources is not applied: vmesh subscribes to every Istio config type it implements"}))
		}
		creds, tw, err := mcpsource.TLSSettings(field+".tlsSettings", cs.GetTlsSettings())
		if err != nil {
			return nil, fmt.Errorf("mesh config %s: %w", file, err)
		}
		for _, w := range tw {
			warns = append(warns, at(w))
		}
		src, err := mcpsource.New(mcpsource.Config{
			Address: cs.GetAddress(), Credentials: creds, Delta: cp.cfg.ConfigSourceDelta,
			Namespace: cp.cfg.CA.RootNamespace, Limits: cp.cfg.limits(), SyncWait: cp.cfg.RegistrySyncWait,
		}, cp.store, cp.log)
		if err != nil {
			return nil, err
		}
		cp.runners = append(cp.runners, src)
		cp.ready = append(cp.ready, src.Ready())
	}
	return warns, nil
}

// configSourceLines returns the line of each configSources entry of a
// mesh config file (0 when it cannot say).
func configSourceLines(file string) map[int]int {
	out := map[int]int{}
	data, err := os.ReadFile(file)
	if err != nil {
		return out
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return out
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "configSources" {
			for j, n := range root.Content[i+1].Content {
				out[j] = n.Line
			}
		}
	}
	return out
}
