// Package registries runs the registry adapters (Consul, ZooKeeper/Dubbo,
// static files) that turn a fleet's existing service registries into
// generated ServiceEntries and WorkloadEntries in the Store, one Store
// source per registry entry. It parses their configuration (the
// --registry flag and the vmesh.yaml section), runs them, and reports their
// status on /debug/registries and in metrics.
package registries

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vmesh/vmesh/registries/consul"
	"github.com/vmesh/vmesh/registries/static"
	"github.com/vmesh/vmesh/registries/zookeeper"
)

// Registry types.
const (
	TypeConsul    = "consul"
	TypeZooKeeper = "zookeeper"
	TypeStatic    = "static"
)

// DefaultNamespace holds generated objects unless a Spec names another.
const DefaultNamespace = "default"

// Spec is one registry entry: the items of vmesh.yaml's `registries:` list,
// or one --registry flag.
//
//	registries:
//	  - name: consul-dc1
//	    type: consul
//	    namespace: default
//	    consul: {address: 127.0.0.1:8500, tokenFile: /etc/vmesh/consul-token}
//	  - type: zookeeper
//	    zookeeper: {servers: [zk1:2181, zk2:2181]}
//	  - type: static
//	    static: {file: /etc/vmesh/inventory.yaml}
type Spec struct {
	// Name names the entry; the Store source is "registry:<name>". Default: the type.
	Name string `yaml:"name,omitempty" json:"name"`
	// Type is consul, zookeeper or static.
	Type string `yaml:"type" json:"type"`
	// Namespace holds the generated objects, default "default".
	Namespace string            `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Consul    *consul.Config    `yaml:"consul,omitempty" json:"consul,omitempty"`
	ZooKeeper *zookeeper.Config `yaml:"zookeeper,omitempty" json:"zookeeper,omitempty"`
	Static    *static.Config    `yaml:"static,omitempty" json:"static,omitempty"`
}

// target names what the entry reads, for the status page.
func (s Spec) target() string {
	switch {
	case s.Consul != nil:
		return s.Consul.Address
	case s.ZooKeeper != nil:
		return strings.Join(s.ZooKeeper.Servers, ",")
	case s.Static != nil:
		return s.Static.File
	}
	return ""
}

// ParseFlag parses one --registry value: consul=ADDR,
// zookeeper=ADDR[,ADDR...] or static=FILE.
func ParseFlag(v string) (Spec, error) {
	typ, val, ok := strings.Cut(v, "=")
	typ = strings.TrimSpace(typ)
	val = strings.TrimSpace(val)
	if !ok || val == "" {
		return Spec{}, fmt.Errorf("--registry %q: want consul=ADDR, zookeeper=ADDR[,ADDR] or static=FILE", v)
	}
	s := Spec{Name: typ, Type: typ}
	switch typ {
	case TypeConsul:
		s.Consul = &consul.Config{Address: val}
	case TypeZooKeeper, "zk":
		s.Type, s.Name = TypeZooKeeper, TypeZooKeeper
		var servers []string
		for _, a := range strings.Split(val, ",") {
			if a = strings.TrimSpace(a); a != "" {
				servers = append(servers, strings.TrimPrefix(a, "zookeeper://"))
			}
		}
		s.ZooKeeper = &zookeeper.Config{Servers: servers}
	case TypeStatic:
		s.Static = &static.Config{File: val}
	default:
		return Spec{}, fmt.Errorf("--registry %q: unknown type %q (want consul, zookeeper or static)", v, typ)
	}
	return s, nil
}

// ParseFlags parses every --registry value and names the entries uniquely
// (consul, consul-2, ...).
func ParseFlags(values []string) ([]Spec, error) {
	var out []Spec
	for _, v := range values {
		s, err := ParseFlag(v)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	seen := map[string]int{}
	for i := range out {
		seen[out[i].Name]++
		if n := seen[out[i].Name]; n > 1 {
			out[i].Name = fmt.Sprintf("%s-%d", out[i].Name, n)
		}
	}
	return out, Validate(out)
}

// Validate checks a set of entries: known types, the matching settings
// present, unique names.
func Validate(specs []Spec) error {
	var errs []error
	names := map[string]bool{}
	for i, s := range specs {
		s = s.withDefaults()
		if names[s.Name] {
			errs = append(errs, fmt.Errorf("registries[%d]: name %q used twice", i, s.Name))
		}
		names[s.Name] = true
		var ok bool
		switch s.Type {
		case TypeConsul:
			ok = s.Consul != nil && s.ZooKeeper == nil && s.Static == nil
		case TypeZooKeeper:
			ok = s.ZooKeeper != nil && s.Consul == nil && s.Static == nil
		case TypeStatic:
			ok = s.Static != nil && s.Consul == nil && s.ZooKeeper == nil
		default:
			errs = append(errs, fmt.Errorf("registries[%d] %q: unknown type %q (want consul, zookeeper or static)", i, s.Name, s.Type))
			continue
		}
		if !ok {
			errs = append(errs, fmt.Errorf("registries[%d] %q: type %s needs its %s: settings and no others", i, s.Name, s.Type, s.Type))
		}
	}
	return errors.Join(errs...)
}

func (s Spec) withDefaults() Spec {
	if s.Name == "" {
		s.Name = s.Type
	}
	if s.Namespace == "" {
		s.Namespace = DefaultNamespace
	}
	return s
}
