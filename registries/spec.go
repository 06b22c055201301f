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
	"log/slog"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/registries/adapter"
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

// registryType is one registry type's row: how --registry names it, what
// its settings section is, what it reads and how its adapter starts. A new
// registry is one row here (and its section in Spec).
type registryType struct {
	name string
	// aliases name the type in --registry too (zk=ADDR).
	aliases []string
	// flagForm is the --registry value's form, for messages.
	flagForm string
	// fromFlag sets the type's settings from a --registry value.
	fromFlag func(s *Spec, val string)
	// set reports whether s carries the type's settings section.
	set func(s Spec) bool
	// target names what the entry reads, for the status page.
	target func(s Spec) string
	// start builds the entry's adapter, which publishes through sink.
	start func(s Spec, sink *adapter.Sink, log *slog.Logger) (adapterRunner, error)
}

// registryTypes lists every registry type, in the order messages name them.
func registryTypes() []registryType {
	return []registryType{
		{
			name: TypeConsul, flagForm: "consul=ADDR",
			fromFlag: func(s *Spec, val string) { s.Consul = &consul.Config{Address: val} },
			set:      func(s Spec) bool { return s.Consul != nil },
			target:   func(s Spec) string { return s.Consul.Address },
			start: func(s Spec, sink *adapter.Sink, log *slog.Logger) (adapterRunner, error) {
				return consul.New(*s.Consul, sink, log)
			},
		},
		{
			name: TypeZooKeeper, aliases: []string{"zk"}, flagForm: "zookeeper=ADDR[,ADDR]",
			fromFlag: func(s *Spec, val string) {
				var servers []string
				for _, a := range strings.Split(val, ",") {
					if a = strings.TrimSpace(a); a != "" {
						servers = append(servers, strings.TrimPrefix(a, "zookeeper://"))
					}
				}
				s.ZooKeeper = &zookeeper.Config{Servers: servers}
			},
			set:    func(s Spec) bool { return s.ZooKeeper != nil },
			target: func(s Spec) string { return strings.Join(s.ZooKeeper.Servers, ",") },
			start: func(s Spec, sink *adapter.Sink, log *slog.Logger) (adapterRunner, error) {
				return zookeeper.New(*s.ZooKeeper, sink, log)
			},
		},
		{
			name: TypeStatic, flagForm: "static=FILE",
			fromFlag: func(s *Spec, val string) { s.Static = &static.Config{File: val} },
			set:      func(s Spec) bool { return s.Static != nil },
			target:   func(s Spec) string { return s.Static.File },
			start: func(s Spec, sink *adapter.Sink, log *slog.Logger) (adapterRunner, error) {
				return static.New(*s.Static, sink, log)
			},
		},
	}
}

// registryTypeNamed returns the row of a type (or, for --registry, an
// alias).
func registryTypeNamed(name string, aliases bool) (registryType, bool) {
	for _, t := range registryTypes() {
		if t.name == name || aliases && slices.Contains(t.aliases, name) {
			return t, true
		}
	}
	return registryType{}, false
}

// typeList names the types' forms as messages list them: "a, b or c".
func typeList(form func(registryType) string) string {
	types := registryTypes()
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = form(t)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// ParseFlag parses one --registry value: consul=ADDR,
// zookeeper=ADDR[,ADDR...] or static=FILE.
func ParseFlag(v string) (Spec, error) {
	typ, val, ok := strings.Cut(v, "=")
	typ = strings.TrimSpace(typ)
	val = strings.TrimSpace(val)
	if !ok || val == "" {
		return Spec{}, fmt.Errorf("--registry %q: want %s", v, typeList(func(t registryType) string { return t.flagForm }))
	}
	t, ok := registryTypeNamed(typ, true)
	if !ok {
		return Spec{}, fmt.Errorf("--registry %q: unknown type %q (want %s)", v, typ, typeList(func(t registryType) string { return t.name }))
	}
	s := Spec{Name: t.name, Type: t.name}
	t.fromFlag(&s, val)
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
		t, known := registryTypeNamed(s.Type, false)
		if !known {
			errs = append(errs, fmt.Errorf("registries[%d] %q: unknown type %q (want %s)", i, s.Name, s.Type, typeList(func(t registryType) string { return t.name })))
			continue
		}
		// Its own settings section, and no other type's.
		ok := true
		for _, other := range registryTypes() {
			ok = ok && other.set(s) == (other.name == t.name)
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
