// Package sharedstate shares what a vmesh replica learns at run time with
// the other replicas, through a store the fleet already runs (DESIGN.md
// "Scale-out"): Consul's KV store or ZooKeeper. It never replicates by
// itself.
//
// A State does three things:
//
//   - it mirrors this replica's auto-registrations (the Store source
//     "registration" that registries/autoregister keeps, health included)
//     into the backend, tied to this replica's session: a Consul session
//     with a TTL (keys deleted when it is invalidated) or a ZooKeeper
//     session (ephemeral nodes). A replica that dies takes its entries with
//     it once the session expires;
//   - it serves the other replicas' entries into the Store as the source
//     "replicas", each with an origin naming its replica;
//   - it shares revocations (certificate serials, identities, bootstrap
//     tokens) as persistent keys / nodes, and applies every one to the local
//     CA's revocation list.
//
// Each replica also heartbeats a record of itself (ID, addresses, build,
// config commit, proxies), which /debug/replicas lists.
package sharedstate

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/filestore"
)

// Backend types.
const (
	TypeConsul    = "consul"
	TypeZooKeeper = "zookeeper"
)

// LocalSource is the Store source this package mirrors: agent
// registrations made through this replica (registries/autoregister).
const LocalSource = "registration"

// Source is the Store source of the other replicas' registrations. Its
// class is the registrations' class, and its name sorts after LocalSource,
// so this replica's own registration of a WorkloadEntry wins over another
// replica's (see Precedence in the README).
var Source = filestore.Source{Name: "replicas", Class: filestore.ClassRegistration}

// Defaults.
const (
	DefaultPrefix = "vmesh"
	// DefaultTTL is the session TTL: a dead replica's registrations go
	// after it (Consul: between TTL and twice the TTL; Consul refuses TTLs
	// under 10s).
	DefaultTTL = 10 * time.Second
	// DefaultHeartbeat is how often a replica rewrites its own record.
	DefaultHeartbeat = 5 * time.Second
)

// Spec configures the shared-state backend: vmesh.yaml's `state:` key, or
// the --state flag ("consul=ADDR", "zookeeper=ADDR[,ADDR]").
//
//	state: {type: consul, address: 127.0.0.1:8500}
//	state: {type: zookeeper, address: "zk1:2181,zk2:2181", prefix: vmesh, ttl: 10s}
type Spec struct {
	// Type is consul or zookeeper.
	Type string `yaml:"type" json:"type"`
	// Address is Consul's HTTP API host:port, or ZooKeeper's servers,
	// comma separated.
	Address string `yaml:"address" json:"address"`
	// Prefix is the Consul KV prefix or the ZooKeeper root node, default "vmesh".
	Prefix string `yaml:"prefix,omitempty" json:"prefix,omitempty"`
	// TTL is the session TTL (Consul) or session timeout (ZooKeeper),
	// default 10s.
	TTL time.Duration `yaml:"ttl,omitempty" json:"ttl,omitempty"`
	// TokenFile holds a Consul ACL token (needs key:write on Prefix and
	// session:write).
	TokenFile string `yaml:"tokenFile,omitempty" json:"tokenFile,omitempty"`
}

// ParseFlag parses a --state value: "consul=ADDR" or "zookeeper=ADDR[,ADDR]".
func ParseFlag(v string) (Spec, error) {
	typ, addr, ok := strings.Cut(v, "=")
	if !ok || addr == "" {
		return Spec{}, fmt.Errorf("--state %q: want consul=ADDR or zookeeper=ADDR[,ADDR]", v)
	}
	s := Spec{Type: typ, Address: addr}
	return s, s.Validate()
}

// String renders the spec as the flag would take it.
func (s Spec) String() string { return s.Type + "=" + s.Address }

// Validate checks the spec.
func (s Spec) Validate() error {
	switch {
	case s.Type != TypeConsul && s.Type != TypeZooKeeper:
		return fmt.Errorf("state: type %q (want consul or zookeeper)", s.Type)
	case strings.TrimSpace(s.Address) == "":
		return fmt.Errorf("state: %s needs an address", s.Type)
	case s.TTL < 0:
		return fmt.Errorf("state: ttl %s must be > 0", s.TTL)
	case s.Type == TypeConsul && s.TTL > 0 && s.TTL < 10*time.Second:
		return fmt.Errorf("state: consul session ttl %s: Consul's minimum is 10s", s.TTL)
	case s.Type == TypeZooKeeper && s.TokenFile != "":
		return fmt.Errorf("state: tokenFile is a Consul ACL token: ZooKeeper takes none (protect the root node with ZooKeeper ACLs)")
	case strings.ContainsAny(strings.Trim(s.Prefix, "/"), " ~"):
		return fmt.Errorf("state: prefix %q must not contain spaces or '~'", s.Prefix)
	}
	return nil
}

func (s Spec) withDefaults() Spec {
	s.Prefix = strings.Trim(cmp.Or(s.Prefix, DefaultPrefix), "/")
	s.TTL = cmp.Or(s.TTL, DefaultTTL)
	return s
}

// Replica is the record each replica heartbeats.
type Replica struct {
	ID         string `json:"id"`
	XDSAddr    string `json:"xdsAddr,omitempty"`
	SecureAddr string `json:"secureAddr,omitempty"`
	HTTPAddr   string `json:"httpAddr,omitempty"`
	// Version and Revision are the build's.
	Version  string `json:"version,omitempty"`
	Revision string `json:"revision,omitempty"`
	// Commit is the config commit the replica serves (git sources).
	Commit string `json:"commit,omitempty"`
	// Proxies is how many proxies are connected to it.
	Proxies    int       `json:"proxies"`
	Registered int       `json:"registered"`
	StartedAt  time.Time `json:"startedAt"`
	Heartbeat  time.Time `json:"heartbeat"`
	// Self marks the replica that answered.
	Self bool `json:"self,omitempty"`
}

// Config configures a State.
type Config struct {
	Spec Spec
	// ID names this replica in the shared state and in the origin of the
	// entries it shares; default "<hostname>-<random>". It must not
	// contain '/' or '~'.
	ID string
	// Describe fills this replica's heartbeat record (addresses, commit,
	// proxies); ID, StartedAt and Heartbeat are set by the State.
	Describe func() Replica
	// CA, when set, receives every shared revocation.
	CA *ca.CA
	// Heartbeat is how often the record is rewritten, default DefaultHeartbeat.
	Heartbeat time.Duration
	// Now is the clock, default time.Now.
	Now func() time.Time
}

// record is one shared registration: a WorkloadEntry and its health.
type record struct {
	Replica     string            `json:"replica"`
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	APIVersion  string            `json:"apiVersion"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Spec        json.RawMessage   `json:"spec"`
	Healthy     *bool             `json:"healthy,omitempty"`
	// Registry is the local origin's Registry ("agent X (group G)").
	Registry string `json:"registry,omitempty"`
	// HealthOnly marks a health report on a config-defined WorkloadEntry
	// (filestore.Store.SetHealth) instead of a registration: only
	// Namespace, Name and Healthy (nil: unknown) are set.
	HealthOnly bool `json:"healthOnly,omitempty"`
	// Updated is when this replica last wrote the entry: among replicas
	// sharing one key, the latest wins.
	Updated time.Time `json:"updated"`
}

// backend is one store: Consul or ZooKeeper.
type backend interface {
	// run keeps the session alive until ctx ends; every time a new
	// session starts (the first included), it sends on sessions: this
	// replica's ephemeral entries are then gone and must be written again.
	run(ctx context.Context, sessions chan<- struct{}) error
	// putReplica and putEntry write this replica's session-bound keys;
	// deleteEntry removes one entry.
	putReplica(ctx context.Context, data []byte) error
	putEntry(ctx context.Context, name string, data []byte) error
	deleteEntry(ctx context.Context, name string) error
	// deleteReplica removes this replica's record (clean stop).
	deleteReplica(ctx context.Context) error
	// watchEntries calls fn with every replica's entries (values by
	// backend key) after each change, until ctx ends.
	watchEntries(ctx context.Context, fn func(map[string][]byte)) error
	// putRevocation stores a revocation for good; watchRevocations calls
	// fn with all of them after each change.
	putRevocation(ctx context.Context, name string, data []byte) error
	watchRevocations(ctx context.Context, fn func([][]byte)) error
	// replicas lists every replica record.
	replicas(ctx context.Context) ([][]byte, error)
	close()
}

// State is one replica's part of the shared state. Run it.
type State struct {
	cfg     Config
	store   *filestore.Store
	log     *slog.Logger
	backend backend
	started time.Time
	// pubMu orders the publications of the source.
	pubMu sync.Mutex

	mu sync.Mutex
	// written is what this replica last wrote for each entry name, and
	// writtenFrom the Store object it was made from (objects in the Store
	// never change: the same pointer needs no comparison).
	written     map[string][]byte
	writtenFrom map[string]*filestore.Object
	// remote holds the other replicas' records by key (latest per key);
	// parsed caches each backend value's record and object by name, so an
	// unchanged value is parsed once.
	remote map[filestore.Key]*parsedRecord
	parsed map[string]*parsedRecord
	// local holds the keys the local registration source serves.
	local map[filestore.Key]bool
	// remoteHealth holds the other replicas' health reports by key
	// (latest per key), and applied the keys handed to the Store.
	remoteHealth map[filestore.Key]record
	applied      map[filestore.Key]bool
	// shared holds the latest shared revocation of each name, once
	// revocationsRead (the first read of them) is set.
	shared          map[string]ca.Revocation
	revocationsRead bool
	synced          chan struct{}
	isSynced        bool
	health          error
	// unreadableEntries holds the registrations that cannot be read, by
	// backend key (their error), and unreadableRevocations the
	// revocations' errors: they are skipped, and shown in Status and the
	// metrics.
	unreadableEntries     map[string]string
	unreadableRevocations []string
}

// New returns a State sharing store's registrations through the backend
// cfg.Spec names. logger nil means slog.Default().
func New(store *filestore.Store, cfg Config, logger *slog.Logger) (*State, error) {
	if err := cfg.Spec.Validate(); err != nil {
		return nil, err
	}
	cfg.Spec = cfg.Spec.withDefaults()
	if cfg.ID == "" {
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		cfg.ID = cmp.Or(sanitizeID(host), "vmesh") + "-" + hex.EncodeToString(b[:])
	}
	if strings.ContainsAny(cfg.ID, "/~ ") {
		return nil, fmt.Errorf("state: replica id %q must not contain '/', '~' or spaces", cfg.ID)
	}
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, DefaultHeartbeat)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "sharedstate", "state", cfg.Spec.Type, "replica", cfg.ID)
	b, err := newBackend(cfg.Spec, cfg.ID, logger)
	if err != nil {
		return nil, err
	}
	return &State{cfg: cfg, store: store, log: logger, backend: b, started: cfg.Now().UTC(),
		written: map[string][]byte{}, writtenFrom: map[string]*filestore.Object{}, remote: map[filestore.Key]*parsedRecord{}, parsed: map[string]*parsedRecord{}, local: map[filestore.Key]bool{},
		shared: map[string]ca.Revocation{}, synced: make(chan struct{})}, nil
}

// The kinds of UnreadableRecord.
const (
	UnreadableRegistration = "registration"
	UnreadableRevocation   = "revocation"
)

// Unreadable counts the shared records of kind (UnreadableRegistration or
// UnreadableRevocation) this replica cannot read and skips now.
func (s *State) Unreadable(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind == UnreadableRevocation {
		return len(s.unreadableRevocations)
	}
	return len(s.unreadableEntries)
}

func newBackend(s Spec, id string, log *slog.Logger) (backend, error) {
	switch s.Type {
	case TypeConsul:
		return newConsul(s, id, log)
	case TypeZooKeeper:
		return newZooKeeper(s, id, log)
	}
	return nil, fmt.Errorf("state: type %q", s.Type)
}

func sanitizeID(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '~' || r == ' ' {
			return '-'
		}
		return r
	}, s)
}

// ID returns this replica's ID.
func (s *State) ID() string { return s.cfg.ID }

// Synced is closed once the other replicas' entries have been read once.
func (s *State) Synced() <-chan struct{} { return s.synced }

// Run shares state until ctx ends. The backend being unreachable is not an
// error: the last known entries keep serving and writes are retried.
func (s *State) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// An empty set first, so the source exists (and is listed) from the start.
	if err := s.store.Replace(Source, nil); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	sessions := make(chan struct{}, 1)
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	goRun := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				errc <- err
				cancel()
			}
		}()
	}
	goRun(func() error { return s.backend.run(ctx, sessions) })
	goRun(func() error { return s.backend.watchEntries(ctx, s.onEntries) })
	if s.cfg.CA != nil {
		goRun(func() error { return s.backend.watchRevocations(ctx, s.onRevocations) })
	}
	goRun(func() error { return s.mirror(ctx, sessions) })
	wg.Wait()
	close(errc)
	// A clean stop removes this replica's record (not its registrations:
	// they outlive it until its session expires, so that its agents have
	// the grace period to register through another replica).
	dctx, stop := context.WithTimeout(context.Background(), 2*time.Second)
	_ = s.backend.deleteReplica(dctx)
	stop()
	s.backend.close()
	return <-errc
}

// mirror writes this replica's registrations and record to the backend:
// after every change of the local registration source, after every new
// session, and every heartbeat.
func (s *State) mirror(ctx context.Context, sessions <-chan struct{}) error {
	sub := s.store.Subscribe()
	defer sub.Close()
	beat := time.NewTicker(s.cfg.Heartbeat)
	defer beat.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	haveSession := false
	dirty := true
	var revocations <-chan struct{} // nil (never ready) without a CA
	if s.cfg.CA != nil {
		revocations = s.cfg.CA.RevocationChanges()
	}
	for {
		if haveSession && dirty {
			if err := s.writeRegistrations(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.setHealth(err)
				s.log.Warn("writing registrations to the shared state failed; retrying", "error", err)
				retry.Reset(time.Second)
			} else {
				dirty = false
				s.setHealth(nil)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sessions:
			// A new session has none of this replica's keys.
			s.mu.Lock()
			clear(s.written)
			clear(s.writtenFrom)
			s.mu.Unlock()
			haveSession, dirty = true, true
			s.heartbeat(ctx)
		case <-sub.C():
			ch := sub.Take()
			if ch.Kinds()[filestore.KindWorkloadEntry] {
				dirty = true
			}
		case <-beat.C:
			if haveSession {
				s.heartbeat(ctx)
			}
			s.shareLocalRevocations(ctx)
		case <-revocations:
			revocations = s.cfg.CA.RevocationChanges()
			s.shareLocalRevocations(ctx)
		case <-retry.C:
		}
	}
}

// heartbeat writes this replica's record.
func (s *State) heartbeat(ctx context.Context) {
	r := Replica{}
	if s.cfg.Describe != nil {
		r = s.cfg.Describe()
	}
	r.ID, r.StartedAt, r.Heartbeat = s.cfg.ID, s.started, s.cfg.Now().UTC()
	s.mu.Lock()
	r.Registered = len(s.written)
	s.mu.Unlock()
	data, _ := json.Marshal(r)
	if err := s.backend.putReplica(ctx, data); err != nil && ctx.Err() == nil {
		s.log.Warn("heartbeat to the shared state failed", "error", err)
	}
}

func (s *State) setHealth(err error) {
	s.mu.Lock()
	s.health = err
	s.mu.Unlock()
}

// healthSuffix ends the backend names of health reports.
const healthSuffix = "~health"

// entryName is an entry's backend name: "<replica>~<namespace>~<name>"
// (a health report's adds healthSuffix).
func entryName(replica string, k filestore.Key) string {
	return replica + "~" + k.Namespace + "~" + k.Name
}

// localEntries returns this replica's registrations as the Store serves
// them, by backend name, and the keys it serves.
func (s *State) localEntries() (map[string]*filestore.Object, map[filestore.Key]bool) {
	snap := s.store.Snapshot()
	out := map[string]*filestore.Object{}
	keys := map[filestore.Key]bool{}
	for _, o := range snap.List(filestore.KindWorkloadEntry) {
		if o.Origin.Source != LocalSource {
			continue
		}
		out[entryName(s.cfg.ID, o.Key)] = o
		keys[o.Key] = true
	}
	return out, keys
}

// writeRegistrations brings the backend to the local registration set.
func (s *State) writeRegistrations(ctx context.Context) error {
	want, keys := s.localEntries()
	s.mu.Lock()
	localChanged := !maps.Equal(keys, s.local)
	s.local = keys
	written := maps.Clone(s.written)
	from := maps.Clone(s.writtenFrom)
	s.mu.Unlock()
	if localChanged {
		s.publishRemote()
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(want)) {
		o := want[name]
		if _, ok := written[name]; ok && from[name] == o {
			continue
		}
		spec, err := protojson.Marshal(o.Spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("entry %s: %w", o.Key, err))
			continue
		}
		rec := record{Replica: s.cfg.ID, Namespace: o.Namespace, Name: o.Name, APIVersion: o.APIVersion,
			Labels: o.Labels, Annotations: o.Annotations, Spec: spec, Healthy: o.Healthy, Registry: o.Origin.Registry}
		// Compare without the time: an unchanged entry is not rewritten.
		body, _ := json.Marshal(rec)
		if prev, ok := written[name]; ok && string(prev) == string(body) {
			s.mu.Lock()
			s.writtenFrom[name] = o
			s.mu.Unlock()
			continue
		}
		rec.Updated = s.cfg.Now().UTC()
		data, _ := json.Marshal(rec)
		if err := s.backend.putEntry(ctx, name, data); err != nil {
			errs = append(errs, fmt.Errorf("entry %s: %w", o.Key, err))
			continue
		}
		s.mu.Lock()
		s.written[name], s.writtenFrom[name] = body, o
		s.mu.Unlock()
	}
	health := s.store.LocalHealth()
	wantHealth := make(map[string]bool, len(health))
	for _, k := range slices.SortedFunc(maps.Keys(health), func(a, b filestore.Key) int { return strings.Compare(a.String(), b.String()) }) {
		name := entryName(s.cfg.ID, k) + healthSuffix
		wantHealth[name] = true
		rec := record{Replica: s.cfg.ID, Namespace: k.Namespace, Name: k.Name, Healthy: health[k], HealthOnly: true}
		body, _ := json.Marshal(rec)
		if prev, ok := written[name]; ok && string(prev) == string(body) {
			continue
		}
		rec.Updated = s.cfg.Now().UTC()
		data, _ := json.Marshal(rec)
		if err := s.backend.putEntry(ctx, name, data); err != nil {
			errs = append(errs, fmt.Errorf("health of %s: %w", k, err))
			continue
		}
		s.mu.Lock()
		s.written[name] = body
		delete(s.writtenFrom, name)
		s.mu.Unlock()
	}
	for name := range written {
		if _, ok := want[name]; ok || wantHealth[name] {
			continue
		}
		if err := s.backend.deleteEntry(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("entry %s: %w", name, err))
			continue
		}
		s.mu.Lock()
		delete(s.written, name)
		delete(s.writtenFrom, name)
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// parsedRecord is one backend value, decoded.
type parsedRecord struct {
	data string
	rec  record
	obj  *filestore.Object
}

// onEntries takes every replica's entries from the backend.
func (s *State) onEntries(values map[string][]byte) {
	s.mu.Lock()
	cache, wasUnreadable := s.parsed, s.unreadableEntries
	s.mu.Unlock()
	unreadable := map[string]string{}
	parsed := make(map[string]*parsedRecord, len(values))
	remote := map[filestore.Key]*parsedRecord{}
	health := map[filestore.Key]record{}
	for name, data := range values {
		p := cache[name]
		if p == nil || p.data != string(data) {
			p = &parsedRecord{data: string(data)}
			err := json.Unmarshal(data, &p.rec)
			if err == nil && (p.rec.Replica == "" || p.rec.Name == "") {
				err = errors.New("no replica or name")
			}
			if err == nil && !p.rec.HealthOnly {
				p.obj, err = p.rec.object()
			}
			if err != nil {
				unreadable[name] = err.Error()
				if wasUnreadable[name] != err.Error() { // logged once; listed in /debug/replicas while it lasts
					s.log.Warn("skipping an unreadable shared registration", "key", name, "error", err)
				}
				continue
			}
		}
		parsed[name] = p
		if p.rec.Replica == s.cfg.ID {
			continue
		}
		if p.rec.HealthOnly {
			k := filestore.Key{Kind: filestore.KindWorkloadEntry, Namespace: p.rec.Namespace, Name: p.rec.Name}
			if cur, ok := health[k]; !ok || newer(p.rec, cur) {
				health[k] = p.rec
			}
			continue
		}
		if cur, ok := remote[p.obj.Key]; ok && !newer(p.rec, cur.rec) {
			continue
		}
		remote[p.obj.Key] = p
	}
	s.mu.Lock()
	s.remote, s.parsed, s.remoteHealth, s.unreadableEntries = remote, parsed, health, unreadable
	s.mu.Unlock()
	s.publishRemote()
	s.applyRemoteHealth()
	s.mu.Lock()
	if !s.isSynced {
		s.isSynced = true
		close(s.synced)
	}
	s.mu.Unlock()
}

// newer reports whether a wins over b for the same key: the later write,
// then the smaller replica ID.
func newer(a, b record) bool {
	if !a.Updated.Equal(b.Updated) {
		return a.Updated.After(b.Updated)
	}
	return a.Replica < b.Replica
}

// publishRemote hands the other replicas' entries to the Store, leaving
// out the keys this replica registers itself.
func (s *State) publishRemote() {
	// Both the watch and the mirror publish: one at a time, so an older
	// set never replaces a newer one.
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.mu.Lock()
	objs := make([]*filestore.Object, 0, len(s.remote))
	for k, p := range s.remote {
		if !s.local[k] {
			objs = append(objs, p.obj)
		}
	}
	s.mu.Unlock()
	if err := s.store.Replace(Source, objs); err != nil {
		s.log.Error("publishing the other replicas' registrations", "error", err)
	}
}

// applyRemoteHealth hands the other replicas' health reports on
// config-defined WorkloadEntries to the Store (a report of this replica's
// own wins there), and removes those no replica holds any more: a dead
// replica's reports go with its session.
func (s *State) applyRemoteHealth() {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.mu.Lock()
	health := s.remoteHealth
	gone := []filestore.Key{}
	for k := range s.applied {
		if _, ok := health[k]; !ok {
			gone = append(gone, k)
		}
	}
	s.applied = make(map[filestore.Key]bool, len(health))
	for k := range health {
		s.applied[k] = true
	}
	s.mu.Unlock()
	for k, rec := range health {
		s.store.SetRemoteHealth(k, rec.Healthy)
	}
	for _, k := range gone {
		s.store.ClearRemoteHealth(k)
	}
}

func (r record) object() (*filestore.Object, error) {
	spec := &networking.WorkloadEntry{}
	if err := protojson.Unmarshal(r.Spec, spec); err != nil {
		return nil, err
	}
	ann := maps.Clone(r.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	ann["vmesh.io/replica"] = r.Replica
	return &filestore.Object{
		Key:        filestore.Key{Kind: filestore.KindWorkloadEntry, Namespace: r.Namespace, Name: r.Name},
		APIVersion: cmp.Or(r.APIVersion, "networking.istio.io/v1"), Labels: r.Labels, Annotations: ann,
		Spec: spec, Healthy: r.Healthy,
		Origin: filestore.Origin{Source: Source.Name, Registry: "replica " + r.Replica + ": " + r.Registry},
	}, nil
}

// revocationName is a revocation's backend name: its kind and value.
func revocationName(rv ca.Revocation) string {
	switch {
	case rv.Serial != "":
		return "serial~" + rv.Serial
	case rv.Token != "":
		return "token~" + escape(rv.Token)
	}
	return "identity~" + escape(rv.Identity)
}

// escape makes a value one path segment.
func escape(v string) string {
	return strings.NewReplacer("%", "%25", "/", "%2F", "~", "%7E", " ", "%20").Replace(v)
}

// onRevocations applies every shared revocation to the CA.
func (s *State) onRevocations(values [][]byte) {
	var rvs []ca.Revocation
	var unreadable []string
	for _, data := range values {
		var rv ca.Revocation
		err := json.Unmarshal(data, &rv)
		if err == nil && rv.Serial == "" && rv.Identity == "" && rv.Token == "" {
			err = errors.New("names no serial, identity or token")
		}
		if err != nil {
			unreadable = append(unreadable, err.Error())
			continue
		}
		rvs = append(rvs, rv)
	}
	s.mu.Lock()
	if len(unreadable) > len(s.unreadableRevocations) {
		s.log.Error("skipping unreadable shared revocations: what they revoke is still accepted here", "unreadable", len(unreadable), "first", unreadable[0])
	}
	s.unreadableRevocations = unreadable
	for _, rv := range rvs {
		name := revocationName(rv)
		if cur, ok := s.shared[name]; !ok || rv.RevokedAt.After(cur.RevokedAt) {
			s.shared[name] = rv
		}
	}
	s.revocationsRead = true
	s.mu.Unlock()
	n, err := s.cfg.CA.ApplyRevocations(rvs)
	if err != nil {
		s.log.Error("applying shared revocations", "error", err)
		return
	}
	if n > 0 {
		s.log.Info("applied shared revocations", "new", n, "total", len(rvs))
	}
}

// shareLocalRevocations shares the revocations this replica's CA lists
// that the shared state lacks (made with `vmesh ca revoke --data-dir` on
// this replica's host), so they reach every replica too: when the CA's
// list changes, and at every heartbeat (a retry).
func (s *State) shareLocalRevocations(ctx context.Context) {
	if s.cfg.CA == nil {
		return
	}
	s.mu.Lock()
	read := s.revocationsRead
	s.mu.Unlock()
	if !read {
		return // not known yet what is shared
	}
	for _, rv := range s.cfg.CA.Revoked() {
		name := revocationName(rv)
		s.mu.Lock()
		cur, ok := s.shared[name]
		s.mu.Unlock()
		if ok && !rv.RevokedAt.After(cur.RevokedAt) {
			continue
		}
		if err := putRevocation(ctx, s.backend, rv); err != nil {
			s.log.Warn("sharing a local revocation failed; retrying", "revocation", name, "error", err)
			return
		}
		s.log.Info("shared a revocation made on this replica", "revocation", name)
		s.mu.Lock()
		s.shared[name] = rv
		s.mu.Unlock()
	}
}

// Revoke shares a revocation with every replica (and this one's CA, when
// it watches).
func (s *State) Revoke(ctx context.Context, rv ca.Revocation) error {
	return putRevocation(ctx, s.backend, rv)
}

func putRevocation(ctx context.Context, b backend, rv ca.Revocation) error {
	data, err := json.Marshal(rv)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := b.putRevocation(ctx, revocationName(rv), data); err != nil {
		return fmt.Errorf("state: revoke: %w", err)
	}
	return nil
}

// Replicas lists the replicas the shared state knows, this one marked
// Self, sorted by ID.
func (s *State) Replicas(ctx context.Context) ([]Replica, error) {
	return listReplicas(ctx, s.backend, s.cfg.ID)
}

func listReplicas(ctx context.Context, b backend, self string) ([]Replica, error) {
	values, err := b.replicas(ctx)
	if err != nil {
		return nil, fmt.Errorf("state: replicas: %w", err)
	}
	out := []Replica{}
	for _, data := range values {
		var r Replica
		if json.Unmarshal(data, &r) != nil || r.ID == "" {
			continue
		}
		r.Self = r.ID == self
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Replica) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Client is a connection to the shared state for the command line: `vmesh
// ca revoke --state` and `vmesh ca revocations --state`. It holds no
// session.
type Client struct {
	b backend
}

// Dial connects to the backend spec names.
func Dial(spec Spec, logger *slog.Logger) (*Client, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	b, err := newBackend(spec.withDefaults(), "", logger)
	if err != nil {
		return nil, err
	}
	return &Client{b: b}, nil
}

// Revoke shares a revocation with every replica.
func (c *Client) Revoke(ctx context.Context, rv ca.Revocation) error {
	return putRevocation(ctx, c.b, rv)
}

// Revocations reads every shared revocation once.
func (c *Client) Revocations(ctx context.Context) ([]ca.Revocation, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []ca.Revocation
	got := make(chan struct{})
	var once sync.Once
	err := c.b.watchRevocations(ctx, func(values [][]byte) {
		once.Do(func() {
			for _, data := range values {
				var rv ca.Revocation
				if json.Unmarshal(data, &rv) == nil {
					out = append(out, rv)
				}
			}
			close(got)
			cancel()
		})
	})
	select {
	case <-got:
		ca.SortRevocations(out)
		return out, nil
	default:
	}
	return nil, cmp.Or(err, ctx.Err(), errors.New("state: no answer"))
}

// Replicas lists the replicas the shared state knows.
func (c *Client) Replicas(ctx context.Context) ([]Replica, error) {
	return listReplicas(ctx, c.b, "")
}

// Close ends the connection.
func (c *Client) Close() { c.b.close() }
