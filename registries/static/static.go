// Package static is the static registry adapter: a YAML file listing
// services and their instances (an inventory exported by another tool)
// becomes the same generated ServiceEntries and WorkloadEntries as a live
// registry. The file is watched like config files; a bad entry is reported
// by line and left out while the rest are kept. See README.md for the format.
package static

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/fsnotify/fsnotify"
	"gopkg.in/yaml.v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/settle"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
)

// Config configures one static registry entry.
type Config struct {
	// File is the YAML inventory.
	File string `yaml:"file" json:"file"`
	// Debounce is how long the file's events must stop before it is read
	// (internal/settle; default settle.DefaultQuiet, a few milliseconds:
	// long enough to read a write whole, with no fixed wait after it).
	Debounce time.Duration `yaml:"debounce,omitempty" json:"debounce,omitempty"`
}

// File is the inventory format.
type File struct {
	Services []Service `yaml:"services"`
}

// Service is one service of the inventory.
type Service struct {
	// Name names the generated ServiceEntry; Host defaults to it.
	Name string `yaml:"name"`
	Host string `yaml:"host"`
	// Protocol: tcp (default), http, http2, grpc, tls, ...
	Protocol string `yaml:"protocol"`
	// Port is the service port; instances listen on it unless they say.
	Port      int               `yaml:"port"`
	Labels    map[string]string `yaml:"labels"`
	Instances []Instance        `yaml:"instances"`
}

// Instance is one instance of a service.
type Instance struct {
	Address  string            `yaml:"address"`
	Port     int               `yaml:"port"`
	Labels   map[string]string `yaml:"labels"`
	Locality string            `yaml:"locality"`
	Weight   int               `yaml:"weight"`
	// Healthy, when set, enables health checks for the instance: false
	// keeps it out of the endpoints.
	Healthy *bool `yaml:"healthy"`
}

var (
	serviceKeys  = []string{"name", "host", "protocol", "port", "labels", "instances"}
	instanceKeys = []string{"address", "port", "labels", "locality", "weight", "healthy"}
)

// Parse turns the file's content into generated objects and the problems
// of the entries it left out. A file that is not YAML returns an error and
// no objects.
func Parse(meta adapter.Meta, file string, data []byte) ([]*store.Object, []store.ConfigError, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	var objs []*store.Object
	var errs []store.ConfigError
	bad := func(n *yaml.Node, field, format string, args ...any) {
		errs = append(errs, store.ConfigError{File: file, Line: n.Line, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if len(doc.Content) == 0 {
		return nil, nil, nil // empty file: no services
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		bad(root, "", "want a mapping with a services list")
		return nil, errs, nil
	}
	var services *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		switch k := root.Content[i]; k.Value {
		case "services":
			services = root.Content[i+1]
		default:
			bad(k, k.Value, "unknown field")
		}
	}
	if services == nil {
		return nil, errs, nil
	}
	if services.Kind != yaml.SequenceNode {
		bad(services, "services", "want a list")
		return nil, errs, nil
	}
	names := map[string]int{}
	for i, sn := range services.Content {
		field := fmt.Sprintf("services[%d]", i)
		if f, ok := unknownKey(sn, serviceKeys); ok {
			bad(f, field+"."+f.Value, "unknown field")
			continue
		}
		var svc Service
		if err := sn.Decode(&svc); err != nil {
			bad(sn, field, "%v", err)
			continue
		}
		if svc.Name == "" && svc.Host != "" {
			svc.Name = svc.Host
		}
		switch {
		case svc.Name == "":
			bad(sn, field+".name", "required")
			continue
		case svc.Port <= 0 || svc.Port > 65535:
			bad(sn, field+".port", "want 1-65535, got %d", svc.Port)
			continue
		}
		name := adapter.ObjectName(svc.Name)
		if line, dup := names[name]; dup {
			bad(sn, field+".name", "service %q already defined at line %d", svc.Name, line)
			continue
		}
		names[name] = sn.Line
		host := svc.Host
		if host == "" {
			host = svc.Name
		}
		proto, portName := adapter.Protocol(svc.Protocol)
		origin := fmt.Sprintf("%s:%d", file, sn.Line)
		objs = append(objs, meta.ServiceEntry(name, origin, []string{host},
			[]*networking.ServicePort{{Number: uint32(svc.Port), Name: portName, Protocol: proto}}, adapter.Labels(nil, svc.Labels)))
		inodes := instanceNodes(sn)
		seen := map[string]int{}
		for j, in := range svc.Instances {
			n := sn
			if j < len(inodes) {
				n = inodes[j]
			}
			ifield := fmt.Sprintf("%s.instances[%d]", field, j)
			if f, ok := unknownKey(n, instanceKeys); ok {
				bad(f, ifield+"."+f.Value, "unknown field")
				continue
			}
			port := in.Port
			if port == 0 {
				port = svc.Port
			}
			switch {
			case in.Address == "":
				bad(n, ifield+".address", "required")
				continue
			case net.ParseIP(in.Address) == nil && !validHostname(in.Address):
				bad(n, ifield+".address", "%q is neither an IP address nor a host name", in.Address)
				continue
			case port < 0 || port > 65535:
				bad(n, ifield+".port", "want 1-65535, got %d", port)
				continue
			case in.Weight < 0:
				bad(n, ifield+".weight", "must not be negative")
				continue
			}
			for k, v := range in.Labels {
				if !adapter.IsLabelKey(k) || !adapter.IsLabelValue(v) {
					bad(n, ifield+".labels."+k, "not a valid label %q=%q", k, v)
				}
			}
			weName := adapter.ObjectName(name, in.Address, strconv.Itoa(port))
			if line, dup := seen[weName]; dup {
				bad(n, ifield, "instance %s:%d already listed at line %d", in.Address, port, line)
				continue
			}
			seen[weName] = n.Line
			labels := adapter.Labels(adapter.Labels(nil, svc.Labels), in.Labels)
			objs = append(objs, meta.WorkloadEntry(weName, fmt.Sprintf("%s:%d", file, n.Line), name, &networking.WorkloadEntry{
				Address: in.Address, Ports: map[string]uint32{portName: uint32(port)},
				Labels: labels, Locality: in.Locality, Weight: uint32(in.Weight),
			}, in.Healthy))
		}
	}
	return objs, errs, nil
}

func unknownKey(n *yaml.Node, allowed []string) (*yaml.Node, bool) {
	if n.Kind != yaml.MappingNode {
		return nil, false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !slices.Contains(allowed, n.Content[i].Value) {
			return n.Content[i], true
		}
	}
	return nil, false
}

func instanceNodes(sn *yaml.Node) []*yaml.Node {
	if sn.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(sn.Content); i += 2 {
		if sn.Content[i].Value == "instances" && sn.Content[i+1].Kind == yaml.SequenceNode {
			return sn.Content[i+1].Content
		}
	}
	return nil
}

var hostnameRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`)

func validHostname(s string) bool { return len(s) <= 253 && hostnameRE.MatchString(s) }

// yamlLine finds the line of a yaml.v3 syntax error ("yaml: line 7: ...").
var yamlLine = regexp.MustCompile(`line (\d+)`)

// Adapter watches one static file.
type Adapter struct {
	cfg  Config
	sink *adapter.Sink
	log  *slog.Logger
}

// New returns an adapter that publishes through sink. logger nil means
// slog.Default().
func New(cfg Config, sink *adapter.Sink, logger *slog.Logger) (*Adapter, error) {
	if cfg.File == "" {
		return nil, errors.New("static: no file")
	}
	sink.ExpectSkips("invalid_entry")
	abs, err := filepath.Abs(cfg.File)
	if err != nil {
		return nil, fmt.Errorf("static: %w", err)
	}
	cfg.File = abs
	if cfg.Debounce <= 0 {
		cfg.Debounce = settle.DefaultQuiet
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Adapter{cfg: cfg, sink: sink, log: logger.With("registry", sink.Meta().Name, "type", "static")}, nil
}

// Run loads the file and reloads it on every change until ctx is done. A
// file that cannot be read or parsed keeps the last good set.
func (a *Adapter) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("static %s: watch: %w", a.cfg.File, err)
	}
	defer w.Close()
	// Watch the directory: editors and config managers replace files by
	// rename, which a watch on the file itself would lose.
	if err := w.Add(filepath.Dir(a.cfg.File)); err != nil {
		return fmt.Errorf("static %s: watch: %w", a.cfg.File, err)
	}
	a.load()
	burst := settle.New(a.cfg.Debounce, settle.DefaultMax)
	defer burst.Stop()
	base := filepath.Base(a.cfg.File)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if filepath.Base(ev.Name) == base {
				burst.Event(time.Now())
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			a.sink.Error(fmt.Errorf("static %s: watch: %w", a.cfg.File, err))
			burst.Event(time.Now())
		case <-burst.C():
			burst.Done()
			a.load()
		}
	}
}

// load reads and applies the file.
func (a *Adapter) load() {
	data, err := os.ReadFile(a.cfg.File)
	if err != nil {
		a.sink.SetConnected(false)
		a.sink.Error(fmt.Errorf("static: %w", err))
		a.sink.ConfigErrors("", []store.ConfigError{{File: a.cfg.File, Message: err.Error()}})
		a.log.Warn("static registry file unreadable; keeping the last good set", "file", a.cfg.File, "error", err)
		return
	}
	a.sink.SetConnected(true)
	objs, errs, err := Parse(a.sink.Meta(), a.cfg.File, data)
	if err != nil {
		ce := store.ConfigError{File: a.cfg.File, Message: err.Error()}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			ce.Line, _ = strconv.Atoi(m[1])
		}
		a.sink.Error(err)
		a.sink.ConfigErrors("", []store.ConfigError{ce})
		a.log.Warn("static registry file is not valid YAML; keeping the last good set", "error", ce.Error())
		return
	}
	for _, e := range errs {
		a.log.Warn("static registry entry left out", "error", e.Error())
		a.sink.Skip("invalid_entry")
	}
	if err := a.sink.Replace(objs); err != nil {
		a.log.Error("publishing static registry failed", "error", err)
		return
	}
	if len(errs) > 0 {
		a.sink.Error(fmt.Errorf("%s: %d entries left out, first: %s", a.cfg.File, len(errs), errs[0].Error()))
	}
	a.sink.ConfigErrors("", errs)
}
