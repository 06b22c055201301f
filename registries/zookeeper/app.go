package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
)

// Instance is one Dubbo 3 application instance: the Curator ServiceInstance
// JSON Dubbo writes at /services/<application>/<ip:port>.
type Instance struct {
	App       string
	ID        string
	Address   string
	Port      uint32
	Metadata  map[string]string
	Endpoints []Endpoint
	Revision  string
}

// ParseInstance decodes an application instance node's data.
func ParseInstance(app, id string, data []byte) (*Instance, error) {
	var doc struct {
		Name    string `json:"name"`
		ID      string `json:"id"`
		Address string `json:"address"`
		Port    *int   `json:"port"`
		Payload struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("instance JSON: %w", err)
	}
	in := &Instance{App: app, ID: id, Address: doc.Address, Metadata: doc.Payload.Metadata}
	if in.Address == "" {
		if h, _, err := net.SplitHostPort(id); err == nil {
			in.Address = h
		}
	}
	if in.Address == "" {
		return nil, errors.New("instance has no address")
	}
	if doc.Port != nil {
		if *doc.Port <= 0 || *doc.Port > 65535 {
			return nil, fmt.Errorf("instance port %d out of range", *doc.Port)
		}
		in.Port = uint32(*doc.Port)
	}
	in.Revision = in.Metadata["dubbo.metadata.revision"]
	if eps := in.Metadata["dubbo.endpoints"]; eps != "" {
		if err := json.Unmarshal([]byte(eps), &in.Endpoints); err != nil {
			return nil, fmt.Errorf("dubbo.endpoints: %w", err)
		}
		in.Endpoints = slices.DeleteFunc(in.Endpoints, func(e Endpoint) bool { return e.Port == 0 || e.Port > 65535 })
	}
	if len(in.Endpoints) == 0 && in.Port != 0 {
		proto := "dubbo"
		var params map[string]string
		if err := json.Unmarshal([]byte(in.Metadata["dubbo.metadata-service.url-params"]), &params); err == nil && params["protocol"] != "" {
			proto = params["protocol"]
		}
		in.Endpoints = []Endpoint{{Port: in.Port, Protocol: proto}}
	}
	if len(in.Endpoints) == 0 {
		return nil, errors.New("instance has no port")
	}
	return in, nil
}

// metadataInfo is Dubbo 3's MetadataInfo JSON, stored at
// /<root>/metadata/<application>/<revision> with remote metadata storage.
type metadataInfo struct {
	App      string                  `json:"app"`
	Revision string                  `json:"revision"`
	Services map[string]*serviceInfo `json:"services"`
}

type serviceInfo struct {
	Name     string `json:"name"`
	Group    string `json:"group"`
	Version  string `json:"version"`
	Protocol string `json:"protocol"`
	Port     uint32 `json:"port"`
}

// startApplications watches /services, the mapping and the metadata.
func (a *Adapter) startApplications(ctx context.Context, w *watcher, wg *sync.WaitGroup) {
	services := "/" + a.cfg.ServicesRoot
	appSet := newWatchSet(wg)
	metaSet := newWatchSet(wg)
	a.begin(services)
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.children(ctx, services, func(children []string, _ bool) {
			want := map[string]bool{}
			for _, c := range children {
				want[c] = true
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			for _, app := range appSet.sync(ctx, want, func(app string) { a.beginLocked(joinPath(a.cfg.ServicesRoot, app)) },
				func(ctx context.Context, app string) { a.watchApplication(ctx, w, wg, metaSet, app) }) {
				delete(a.apps, app)
			}
			a.syncMetadataLocked(ctx, w, metaSet)
			a.doneLocked(services)
			a.appDirty = true
			a.pub.Mark()
		})
	}()

	mapping := joinPath(a.cfg.Root, "mapping")
	mapSet := newWatchSet(wg)
	a.begin(mapping)
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.children(ctx, mapping, func(children []string, _ bool) {
			want := map[string]bool{}
			for _, c := range children {
				want[c] = true
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			for _, iface := range mapSet.sync(ctx, want, func(iface string) { a.beginLocked(joinPath(a.cfg.Root, "mapping", iface)) },
				func(ctx context.Context, iface string) { a.watchMapping(ctx, w, iface) }) {
				delete(a.mapping, iface)
			}
			a.doneLocked(mapping)
			a.appDirty = true
			a.pub.Mark()
		})
	}()
}

// watchApplication keeps the instances of one application.
func (a *Adapter) watchApplication(ctx context.Context, w *watcher, wg *sync.WaitGroup, metaSet *watchSet, app string) {
	p := joinPath(a.cfg.ServicesRoot, app)
	instSet := newWatchSet(wg)
	defer instSet.stopAll()
	w.children(ctx, p, func(children []string, _ bool) {
		want := map[string]bool{}
		for _, c := range children {
			want[c] = true
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if a.apps[app] == nil {
			a.apps[app] = map[string]*Instance{}
		}
		for _, id := range instSet.sync(ctx, want, func(id string) { a.beginLocked(p + "/" + id) },
			func(ctx context.Context, id string) { a.watchInstance(ctx, w, metaSet, app, id) }) {
			delete(a.apps[app], id)
			delete(a.badEntries, p+"/"+id)
		}
		a.syncMetadataLocked(ctx, w, metaSet)
		a.doneLocked(p)
		a.appDirty = true
		a.pub.Mark()
	})
}

// watchInstance keeps one application instance's data.
func (a *Adapter) watchInstance(ctx context.Context, w *watcher, metaSet *watchSet, app, id string) {
	p := joinPath(a.cfg.ServicesRoot, app, id)
	w.data(ctx, p, func(data []byte, exists bool) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if ctx.Err() != nil || a.apps[app] == nil {
			return
		}
		delete(a.apps[app], id)
		if exists {
			in, err := ParseInstance(app, id, data)
			if err != nil {
				a.malformedLocked(p, "malformed_instance", "skipping malformed Dubbo application instance", err)
			} else {
				delete(a.badEntries, p)
				a.apps[app][id] = in
			}
		}
		a.syncMetadataLocked(ctx, w, metaSet)
		a.doneLocked(p)
		a.appDirty = true
		a.pub.Mark()
	})
}

// watchMapping keeps one interface's application list: the node data is a
// comma-separated list of applications (Dubbo 3).
func (a *Adapter) watchMapping(ctx context.Context, w *watcher, iface string) {
	p := joinPath(a.cfg.Root, "mapping", iface)
	w.data(ctx, p, func(data []byte, _ bool) {
		var apps []string
		for _, s := range strings.Split(string(data), ",") {
			if s = strings.TrimSpace(s); s != "" {
				apps = append(apps, s)
			}
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		a.mapping[iface] = apps
		a.doneLocked(p)
		a.appDirty = true
		a.pub.Mark()
	})
}

// syncMetadataLocked watches the metadata of every (application, revision)
// some instance announces.
func (a *Adapter) syncMetadataLocked(ctx context.Context, w *watcher, metaSet *watchSet) {
	want := map[string]bool{}
	for app, insts := range a.apps {
		for _, in := range insts {
			if in.Revision != "" {
				want[app+"/"+in.Revision] = true
			}
		}
	}
	for _, k := range metaSet.sync(ctx, want, nil, func(ctx context.Context, k string) { a.watchMetadata(ctx, w, k) }) {
		delete(a.metadata, k)
	}
}

// watchMetadata keeps one application revision's MetadataInfo, when the
// application stores it in ZooKeeper (remote metadata storage).
func (a *Adapter) watchMetadata(ctx context.Context, w *watcher, appRev string) {
	p := joinPath(a.cfg.Root, "metadata", appRev)
	w.data(ctx, p, func(data []byte, exists bool) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		delete(a.metadata, appRev)
		if exists {
			var md metadataInfo
			if err := json.Unmarshal(data, &md); err != nil {
				a.malformedLocked(p, "malformed_metadata", "skipping malformed Dubbo metadata", err)
			} else {
				a.metadata[appRev] = &md
			}
		}
		a.appDirty = true
		a.pub.Mark()
	})
}

// applicationObjectsLocked generates, for each application with
// instances, a ServiceEntry for the application (ApplicationHost) and one
// for each Dubbo service it provides: from its MetadataInfo when stored in
// ZooKeeper, else from the interface→application mapping. Each gets one
// WorkloadEntry per instance.
func (a *Adapter) applicationObjectsLocked() map[serviceKey][]*store.Object {
	byKey := map[serviceKey][]member{}
	origins := map[serviceKey]string{}
	provided := map[string][]string{} // application → interfaces, from the mapping
	for iface, apps := range a.mapping {
		for _, app := range apps {
			provided[app] = append(provided[app], iface)
		}
	}
	for app, insts := range a.apps {
		if len(insts) == 0 {
			continue
		}
		appKey := serviceKey{app: app}
		origins[appKey] = joinPath(a.cfg.ServicesRoot, app)
		for _, id := range slices.Sorted(maps.Keys(insts)) {
			in := insts[id]
			labels := adapter.Labels(map[string]string{}, in.Metadata)
			if adapter.IsLabelValue(app) {
				labels["application"] = app
			}
			origin := joinPath(a.cfg.ServicesRoot, app, id)
			byKey[appKey] = append(byKey[appKey], member{address: in.Address, eps: in.Endpoints, labels: labels, origin: origin, order: id})

			var services []*serviceInfo
			if md := a.metadata[app+"/"+in.Revision]; md != nil && in.Revision != "" {
				for _, s := range md.Services {
					services = append(services, s)
				}
			} else {
				for _, iface := range provided[app] {
					services = append(services, &serviceInfo{Name: iface})
				}
			}
			for _, s := range services {
				if s == nil || s.Name == "" {
					continue
				}
				k := serviceKey{iface: s.Name, group: s.Group, version: s.Version}
				origins[k] = joinPath(a.cfg.Root, "mapping", s.Name)
				eps := in.Endpoints
				if s.Protocol != "" {
					eps = endpointsFor(in.Endpoints, s.Protocol, s.Port)
				}
				l := make(map[string]string, len(labels)+2)
				for k, v := range labels {
					l[k] = v
				}
				if s.Group != "" && adapter.IsLabelValue(s.Group) {
					l["group"] = s.Group
				}
				if s.Version != "" && adapter.IsLabelValue(s.Version) {
					l["version"] = s.Version
				}
				byKey[k] = append(byKey[k], member{address: in.Address, eps: eps, labels: l, origin: origin, order: id})
			}
		}
	}
	out := make(map[serviceKey][]*store.Object, len(byKey))
	for k, ms := range byKey {
		host := InterfaceHost(k.iface, k.group, k.version, a.cfg.HostSuffix)
		if k.app != "" {
			host = ApplicationHost(k.app, a.cfg.HostSuffix)
		}
		out[k] = a.serviceObjects(host, origins[k], ms)
	}
	return out
}

// endpointsFor picks an instance's endpoints of one protocol; when it
// announces none, the service's own port.
func endpointsFor(eps []Endpoint, protocol string, port uint32) []Endpoint {
	var out []Endpoint
	for _, e := range eps {
		if strings.EqualFold(e.Protocol, protocol) {
			out = append(out, e)
		}
	}
	if len(out) == 0 && port != 0 {
		out = []Endpoint{{Port: port, Protocol: protocol}}
	}
	return out
}
