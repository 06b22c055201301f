// Package sharedstate shares what a vmesh replica learns at run time with
// the other replicas, through a store the fleet already runs (DESIGN.md
// "Scale-out"): Consul's KV store or ZooKeeper. It never replicates by
// itself.
//
// A State does three things:
//
//   - it mirrors this replica's auto-registrations (the Store source
//     "registration" that writers/autoregister keeps, health included)
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
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

// Backend types.
const (
	TypeConsul    = "consul"
	TypeZooKeeper = "zookeeper"
)

// LocalSource is the Store source this package mirrors: agent
// registrations made through this replica (writers/autoregister).
const LocalSource = "registration"

// Source is the Store source of the other replicas' registrations. Its
// class is the registrations' class, and its name sorts after LocalSource,
// so this replica's own registration of a WorkloadEntry wins over another
// replica's (see Precedence in the README).
var Source = store.Source{Name: "replicas", Class: store.ClassRegistration}

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
	// KeyFile holds the state key (at least MinKeyBytes random bytes)
	// that signs every shared record; without it the key is derived from
	// the plug-in CA's issuing key (KeyFromCACerts), and without either
	// a replica refuses to start.
	KeyFile string `yaml:"keyFile,omitempty" json:"keyFile,omitempty"`
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
	ID string `json:"id"`
	// Session is the store session holding the record (Consul's session
	// ID, ZooKeeper's session in hex): the other replicas accept only the
	// registrations that session holds.
	Session    string `json:"session,omitempty"`
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
	// Key signs every record this replica writes and authenticates every
	// record it reads (required: LoadKeyFile, KeyFromCACerts).
	Key Key
	// CA, when set, receives every shared revocation.
	CA *ca.CA
	// Heartbeat is how often the record is rewritten, default DefaultHeartbeat.
	Heartbeat time.Duration
	// Now is the clock, default time.Now.
	Now func() time.Time
}

// MaxClockSkew is how far in the future a shared record may be dated (a
// registration's or health report's Updated, a revocation's RevokedAt):
// later ones are refused.
const MaxClockSkew = time.Minute

// record is one shared registration: a WorkloadEntry and its health.
type record struct {
	Replica string `json:"replica"`
	// Session is the store session of the writing replica: the record is
	// accepted only while that session holds it and the replica's record.
	Session     string            `json:"session"`
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
	// (store.Store.SetHealth) instead of a registration: only
	// Namespace, Name and Healthy (nil: unknown) are set.
	HealthOnly bool `json:"healthOnly,omitempty"`
	// Updated is when this replica last wrote the entry: among replicas
	// sharing one key, the latest wins.
	Updated time.Time `json:"updated"`
}

// value is one record as the backend holds it.
type value struct {
	// name is the record's name under its directory, without a ZooKeeper
	// sequence; key is the backend's own (a ZooKeeper child, a Consul key
	// under the directory), for reports.
	name, key string
	data      []byte
	// session holds the record: Consul's KV session, ZooKeeper's
	// ephemeral owner in hex; "" when none (a persistent node or key).
	session string
}

// backend is one store: Consul or ZooKeeper.
type backend interface {
	// session names the current session ("" before the first).
	session() string
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
	// watchEntries calls fn with every replica's entries after each
	// change, until ctx ends; watchReplicas with the replicas' records.
	watchEntries(ctx context.Context, fn func([]value)) error
	watchReplicas(ctx context.Context, fn func([]value)) error
	// putRevocation stores a revocation for good; watchRevocations calls
	// fn with all of them after each change.
	putRevocation(ctx context.Context, name string, data []byte) error
	watchRevocations(ctx context.Context, fn func([]value)) error
	// replicas lists every replica record.
	replicas(ctx context.Context) ([]value, error)
	close()
}

// State is one replica's part of the shared state. Run it.
type State struct {
	cfg     Config
	store   *store.Store
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
	writtenFrom map[string]*store.Object
	// evalMu orders the evaluations of the entries (the entries' watch
	// and the replicas' watch both evaluate).
	evalMu sync.Mutex
	// entries and live are the backend's last entries and live replicas
	// (ID → session of its signed record).
	entries []value
	live    map[string]string
	// remote holds the other replicas' records by key (latest per key);
	// parsed caches each backend value's record and object by key, so an
	// unchanged value is authenticated and validated once.
	remote map[store.Key]*parsedRecord
	parsed map[string]*parsedRecord
	// local holds the keys the local registration source serves.
	local map[store.Key]bool
	// remoteHealth holds the other replicas' health reports by key
	// (latest per key), and applied the keys handed to the Store.
	remoteHealth map[store.Key]record
	applied      map[store.Key]bool
	// shared holds the latest shared revocation of each name as the store
	// holds them now, once revocationsRead (the first read of them) is
	// set; republish asks mirror to write the local ones it lacks.
	shared          map[string]ca.Revocation
	revocationsRead bool
	republish       chan struct{}
	synced          chan struct{}
	isSynced        bool
	health          error
	// refusedEntries, refusedRevocations and refusedReplicas hold the
	// records refused (unreadable, unsigned, forged, unbound, invalid,
	// future-dated) by backend key: they are skipped, and shown in
	// Status and the metrics; refusedTotal counts every refusal by kind.
	refusedEntries     map[string]*refusal
	refusedRevocations map[string]*refusal
	refusedReplicas    map[string]*refusal
	refusedTotal       map[string]uint64
}

// New returns a State sharing store's registrations through the backend
// cfg.Spec names. logger nil means slog.Default().
func New(st *store.Store, cfg Config, logger *slog.Logger) (*State, error) {
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
	if !cfg.Key.valid() {
		return nil, errNoKey
	}
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, DefaultHeartbeat)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "sharedstate", "state", cfg.Spec.Type, "replica", cfg.ID)
	b, err := newBackend(cfg.Spec, cfg.ID, cfg.Key, logger)
	if err != nil {
		return nil, err
	}
	logger.Info("shared state: records signed and checked with the state key", "keyID", cfg.Key.ID())
	return &State{cfg: cfg, store: st, log: logger, backend: b, started: cfg.Now().UTC(),
		written: map[string][]byte{}, writtenFrom: map[string]*store.Object{}, remote: map[store.Key]*parsedRecord{}, parsed: map[string]*parsedRecord{}, local: map[store.Key]bool{},
		shared: map[string]ca.Revocation{}, republish: make(chan struct{}, 1), synced: make(chan struct{}),
		refusedTotal: map[string]uint64{}}, nil
}

var errNoKey = errors.New("state: no state key: every record replicas share is signed with a key only they hold; " +
	"give --state-key-file (state.keyFile: at least 32 random bytes, e.g. `head -c 32 /dev/urandom > /etc/vmesh/state.key; chmod 0600 /etc/vmesh/state.key`, the same file on every replica) " +
	"or a --cacerts-dir shared by every replica (the key is then derived from its ca-key.pem)")

// The kinds of UnreadableRecord.
const (
	UnreadableRegistration = "registration"
	UnreadableRevocation   = "revocation"
	UnreadableReplica      = "replica"
)

// Unreadable counts the shared records of kind (UnreadableRegistration,
// UnreadableRevocation or UnreadableReplica) this replica refuses and skips
// now: unreadable, unsigned or forged, not bound to a live replica,
// invalid or future-dated.
func (s *State) Unreadable(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch kind {
	case UnreadableRevocation:
		return len(s.refusedRevocations)
	case UnreadableReplica:
		return len(s.refusedReplicas)
	}
	return len(s.refusedEntries)
}

// RefusedTotal counts the shared records of kind this replica refused
// since it started (each refused value once).
func (s *State) RefusedTotal(kind string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusedTotal[kind]
}

// noteRefused records the refusals of one kind (by backend key), counting
// and logging the new ones: the key and the reason, never the value.
func (s *State) noteRefused(kind string, was, now map[string]*refusal) {
	for _, k := range slices.Sorted(maps.Keys(now)) {
		r := now[k]
		if old := was[k]; old != nil && old.Error() == r.Error() {
			continue
		}
		s.mu.Lock()
		s.refusedTotal[kind]++
		s.mu.Unlock()
		level := slog.LevelWarn
		if r.reason == ReasonUnbound {
			level = slog.LevelInfo // also while a replica starts or goes
		}
		s.log.Log(context.Background(), level, "refusing a shared record", "kind", kind, "key", k, "reason", r.reason, "error", r.msg)
	}
}

func newBackend(s Spec, id string, key Key, log *slog.Logger) (backend, error) {
	switch s.Type {
	case TypeConsul:
		return newConsul(s, id, log)
	case TypeZooKeeper:
		return newZooKeeper(s, id, key, log)
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
	goRun(func() error { return s.backend.watchReplicas(ctx, s.onReplicas) })
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
			if ch.Kinds()[store.KindWorkloadEntry] {
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
		case <-s.republish:
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
	r.ID, r.StartedAt, r.Heartbeat, r.Session = s.cfg.ID, s.started, s.cfg.Now().UTC(), s.backend.session()
	r.Self = false
	s.mu.Lock()
	r.Registered = len(s.written)
	s.mu.Unlock()
	body, _ := json.Marshal(r)
	data := s.cfg.Key.seal(s.cfg.Spec.Prefix, replicaName(s.cfg.ID), body)
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
func entryName(replica string, k store.Key) string {
	return replica + "~" + k.Namespace + "~" + k.Name
}

// localEntries returns this replica's registrations as the Store serves
// them, by backend name, and the keys it serves.
func (s *State) localEntries() (map[string]*store.Object, map[store.Key]bool) {
	snap := s.store.Snapshot()
	out := map[string]*store.Object{}
	keys := map[store.Key]bool{}
	for _, o := range snap.List(store.KindWorkloadEntry) {
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
	session := s.backend.session()
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
		rec := record{Replica: s.cfg.ID, Session: session, Namespace: o.Namespace, Name: o.Name, APIVersion: o.APIVersion,
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
		if err := s.backend.putEntry(ctx, name, s.cfg.Key.seal(s.cfg.Spec.Prefix, entryPath(name), data)); err != nil {
			errs = append(errs, fmt.Errorf("entry %s: %w", o.Key, err))
			continue
		}
		s.mu.Lock()
		s.written[name], s.writtenFrom[name] = body, o
		s.mu.Unlock()
	}
	health := s.store.LocalHealth()
	wantHealth := make(map[string]bool, len(health))
	for _, k := range slices.SortedFunc(maps.Keys(health), func(a, b store.Key) int { return strings.Compare(a.String(), b.String()) }) {
		name := entryName(s.cfg.ID, k) + healthSuffix
		wantHealth[name] = true
		rec := record{Replica: s.cfg.ID, Session: session, Namespace: k.Namespace, Name: k.Name, Healthy: health[k], HealthOnly: true}
		body, _ := json.Marshal(rec)
		if prev, ok := written[name]; ok && string(prev) == string(body) {
			continue
		}
		rec.Updated = s.cfg.Now().UTC()
		data, _ := json.Marshal(rec)
		if err := s.backend.putEntry(ctx, name, s.cfg.Key.seal(s.cfg.Spec.Prefix, entryPath(name), data)); err != nil {
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

// parsedRecord is one backend value, authenticated and decoded.
type parsedRecord struct {
	data    string
	session string
	rec     record
	obj     *store.Object
	err     *refusal
}

// replicaName and entryPath are the names records are signed under.
func replicaName(id string) string      { return "replicas/" + id }
func entryPath(name string) string      { return "registrations/" + name }
func revocationPath(name string) string { return "revocations/" + name }

// parse authenticates and validates one registration value (everything but
// its binding to a live replica, which changes without it).
func (s *State) parse(v value) *parsedRecord {
	p := &parsedRecord{data: string(v.data), session: v.session}
	body, r := s.cfg.Key.open(s.cfg.Spec.Prefix, entryPath(v.name), v.data)
	if r != nil {
		p.err = r
		return p
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p.rec); err != nil {
		p.err = refuse(ReasonUnreadable, "not a registration record")
		return p
	}
	rec := p.rec
	k := store.Key{Kind: store.KindWorkloadEntry, Namespace: rec.Namespace, Name: rec.Name}
	want := entryName(rec.Replica, k)
	if rec.HealthOnly {
		want += healthSuffix
	}
	switch {
	case rec.Replica == "" || rec.Name == "" || rec.Namespace == "" || rec.Session == "":
		p.err = refuse(ReasonUnreadable, "no replica, session, namespace or name")
	case strings.ContainsAny(rec.Replica, "/~ "):
		p.err = refuse(ReasonInvalid, "replica ID with '/', '~' or spaces")
	case want != v.name:
		p.err = refuse(ReasonInvalid, "the record's replica, namespace and name do not match its key")
	case rec.Updated.IsZero():
		p.err = refuse(ReasonInvalid, "no updated time")
	case rec.HealthOnly:
		if !validName(rec.Namespace) || !validName(rec.Name) {
			p.err = refuse(ReasonInvalid, "namespace or name is not a DNS-1123 name")
		}
	default:
		obj, err := rec.object()
		if err != nil {
			p.err = refuse(ReasonInvalid, "%v", err)
			break
		}
		p.obj = obj
	}
	return p
}

// onEntries takes every replica's entries from the backend.
func (s *State) onEntries(values []value) {
	s.evalMu.Lock()
	defer s.evalMu.Unlock()
	s.entries = values
	if s.live != nil { // else the replicas' first read evaluates them
		s.evaluate()
	}
}

// onReplicas takes the replicas' records: the live replicas are those
// whose signed record names the session holding it. Entries are evaluated
// again when that set changes.
func (s *State) onReplicas(values []value) {
	live := map[string]string{}
	refused := map[string]*refusal{}
	for _, v := range values {
		rep, r := openReplica(s.cfg.Key, s.cfg.Spec.Prefix, v, s.cfg.Now())
		if r != nil {
			refused[v.key] = r
			continue
		}
		live[rep.ID] = rep.Session
	}
	s.mu.Lock()
	was := s.refusedReplicas
	s.refusedReplicas = refused
	s.mu.Unlock()
	s.noteRefused(UnreadableReplica, was, refused)
	s.evalMu.Lock()
	defer s.evalMu.Unlock()
	if s.live != nil && maps.Equal(live, s.live) {
		return
	}
	s.live = live
	if s.entries != nil {
		s.evaluate()
	}
}

// openReplica authenticates one replica record: signed under its name,
// and held by the session it names.
func openReplica(key Key, prefix string, v value, now time.Time) (Replica, *refusal) {
	body, r := key.open(prefix, replicaName(v.name), v.data)
	if r != nil {
		return Replica{}, r
	}
	var rep Replica
	if err := json.Unmarshal(body, &rep); err != nil {
		return Replica{}, refuse(ReasonUnreadable, "not a replica record")
	}
	switch {
	case rep.ID != v.name:
		return Replica{}, refuse(ReasonInvalid, "the record's ID does not match its key")
	case rep.Session == "" || rep.Session != v.session:
		return Replica{}, refuse(ReasonUnbound, "not held by the session it names (a copy of an old record, or a key without a session)")
	case rep.Heartbeat.After(now.Add(MaxClockSkew)):
		return Replica{}, refuse(ReasonFuture, "heartbeat in the future (allowed clock skew %s)", MaxClockSkew)
	}
	rep.Self = false
	return rep, nil
}

// evaluate serves the entries that are authentic, valid, not from the
// future and held by the live session of the replica that wrote them;
// every other is refused. Called with evalMu held.
func (s *State) evaluate() {
	now := s.cfg.Now()
	s.mu.Lock()
	cache, was := s.parsed, s.refusedEntries
	s.mu.Unlock()
	refused := map[string]*refusal{}
	parsed := make(map[string]*parsedRecord, len(s.entries))
	remote := map[store.Key]*parsedRecord{}
	health := map[store.Key]record{}
	for _, v := range s.entries {
		p := cache[v.key]
		if p == nil || p.data != string(v.data) || p.session != v.session {
			p = s.parse(v)
		}
		parsed[v.key] = p
		if p.err != nil {
			refused[v.key] = p.err
			continue
		}
		switch {
		case p.rec.Replica == s.cfg.ID:
			continue // this replica's own
		case p.rec.Updated.After(now.Add(MaxClockSkew)):
			refused[v.key] = refuse(ReasonFuture, "updated %s, later than now plus the allowed clock skew (%s)", p.rec.Updated.UTC().Format(time.RFC3339), MaxClockSkew)
			continue
		case v.session != p.rec.Session:
			refused[v.key] = refuse(ReasonUnbound, "not held by the session it names (written by hand, or a copy)")
			continue
		case s.live[p.rec.Replica] != p.rec.Session:
			refused[v.key] = refuse(ReasonUnbound, "replica %s has no live record of the session it names", p.rec.Replica)
			continue
		}
		if p.rec.HealthOnly {
			k := store.Key{Kind: store.KindWorkloadEntry, Namespace: p.rec.Namespace, Name: p.rec.Name}
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
	s.remote, s.parsed, s.remoteHealth, s.refusedEntries = remote, parsed, health, refused
	s.mu.Unlock()
	s.noteRefused(UnreadableRegistration, was, refused)
	s.publishRemote()
	s.applyRemoteHealth()
	s.mu.Lock()
	if !s.isSynced && s.live != nil {
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
	objs := make([]*store.Object, 0, len(s.remote))
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
	gone := []store.Key{}
	for k := range s.applied {
		if _, ok := health[k]; !ok {
			gone = append(gone, k)
		}
	}
	s.applied = make(map[store.Key]bool, len(health))
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

// validName reports whether v is a DNS-1123 subdomain, as Kubernetes and
// Istio name namespaces and objects.
func validName(v string) bool {
	if v == "" || len(v) > 253 {
		return false
	}
	for i, r := range v {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case (r == '-' || r == '.') && i > 0 && i < len(v)-1:
		default:
			return false
		}
	}
	return true
}

// object decodes the record's WorkloadEntry exactly as a file holding it
// would be decoded (filestore.DecodeFile: the schema, Istio's validation),
// and then requires what a registration always has: an IP address (a file
// may name a host; an agent registers its VM's IP).
func (r record) object() (*store.Object, error) {
	if len(r.Spec) == 0 || r.Spec[0] != '{' {
		return nil, errors.New("spec: not an object")
	}
	meta := map[string]any{"name": r.Name, "namespace": r.Namespace}
	if len(r.Labels) > 0 {
		meta["labels"] = r.Labels
	}
	if len(r.Annotations) > 0 {
		meta["annotations"] = r.Annotations
	}
	doc, err := json.Marshal(map[string]any{
		"apiVersion": cmp.Or(r.APIVersion, "networking.istio.io/v1"), "kind": string(store.KindWorkloadEntry),
		"metadata": meta, "spec": r.Spec,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding: %w", err)
	}
	d := filestore.DecodeFile("shared registration", doc, filestore.Limits{MaxFileBytes: 64 << 10, MaxDocuments: 1, MaxProblems: 5})
	if len(d.Errors) > 0 {
		e := d.Errors[0]
		return nil, fmt.Errorf("%s: %s", cmp.Or(e.Field, "spec"), e.Message)
	}
	if len(d.Objects) != 1 || d.Objects[0].Kind != store.KindWorkloadEntry {
		return nil, errors.New("not one WorkloadEntry")
	}
	o := d.Objects[0]
	spec := o.Spec.(*networking.WorkloadEntry)
	if a, err := netip.ParseAddr(spec.GetAddress()); err != nil || a.Zone() != "" {
		return nil, errors.New("spec.address: a registration's address must be an IP address")
	}
	if o.Key.Namespace != r.Namespace || o.Key.Name != r.Name {
		return nil, errors.New("metadata: namespace or name changed in decoding")
	}
	ann := maps.Clone(o.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	ann["vmesh.io/replica"] = r.Replica
	return &store.Object{
		Key: o.Key, APIVersion: o.APIVersion, Labels: o.Labels, Annotations: ann,
		Spec: spec, Healthy: r.Healthy,
		Origin: store.Origin{Source: Source.Name, Registry: "replica " + r.Replica + ": " + r.Registry},
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

// openRevocation authenticates and validates one shared revocation: signed
// under its name, named after what it revokes, valid and not from the
// future (ca.Revocation.Validate).
func openRevocation(key Key, prefix string, v value, now time.Time) (ca.Revocation, *refusal) {
	body, r := key.open(prefix, revocationPath(v.name), v.data)
	if r != nil {
		return ca.Revocation{}, r
	}
	var rv ca.Revocation
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rv); err != nil {
		return ca.Revocation{}, refuse(ReasonUnreadable, "not a revocation record")
	}
	if err := rv.Validate(now); err != nil {
		reason := ReasonInvalid
		if rv.RevokedAt.After(now.Add(ca.MaxRevocationSkew)) {
			reason = ReasonFuture
		}
		return ca.Revocation{}, refuse(reason, "%v", err)
	}
	if revocationName(rv) != v.name {
		return ca.Revocation{}, refuse(ReasonInvalid, "the revocation does not match its key")
	}
	return rv, nil
}

// onRevocations applies every authentic, valid shared revocation to the CA
// and refuses the others; when the store lacks a revocation this
// replica's CA holds (deleted from the store), mirror writes it again.
func (s *State) onRevocations(values []value) {
	now := s.cfg.Now()
	var rvs []ca.Revocation
	refused := map[string]*refusal{}
	shared := map[string]ca.Revocation{}
	for _, v := range values {
		rv, r := openRevocation(s.cfg.Key, s.cfg.Spec.Prefix, v, now)
		if r != nil {
			refused[v.key] = r
			continue
		}
		rvs = append(rvs, rv)
		if cur, ok := shared[v.name]; !ok || rv.RevokedAt.After(cur.RevokedAt) {
			shared[v.name] = rv
		}
	}
	s.mu.Lock()
	was := s.refusedRevocations
	s.refusedRevocations = refused
	s.shared = shared
	s.revocationsRead = true
	s.mu.Unlock()
	s.noteRefused(UnreadableRevocation, was, refused)
	if len(refused) > 0 && len(was) < len(refused) {
		s.log.Error("refusing shared revocations: what they name is not revoked here by them", "refused", len(refused))
	}
	n, err := s.cfg.CA.ApplyRevocations(rvs)
	if err != nil {
		s.log.Error("applying shared revocations", "error", err)
	} else if n > 0 {
		s.log.Info("applied shared revocations", "new", n, "total", len(rvs))
	}
	if len(s.missingRevocations()) > 0 {
		select {
		case s.republish <- struct{}{}:
		default:
		}
	}
}

// missingRevocations lists the revocations this replica's CA holds (and
// that still matter) which the store lacks, once the store was read.
func (s *State) missingRevocations() []ca.Revocation {
	s.mu.Lock()
	read := s.revocationsRead
	shared := s.shared
	s.mu.Unlock()
	if !read || s.cfg.CA == nil {
		return nil
	}
	now := s.cfg.Now()
	var out []ca.Revocation
	for _, rv := range s.cfg.CA.Revoked() {
		if !rv.NotAfter.IsZero() && rv.NotAfter.Before(now) || rv.Validate(now) != nil {
			continue
		}
		if cur, ok := shared[revocationName(rv)]; ok && !rv.RevokedAt.After(cur.RevokedAt) {
			continue
		}
		out = append(out, rv)
	}
	return out
}

// shareLocalRevocations writes the revocations this replica's CA lists
// that the shared state lacks: made with `vmesh ca revoke --data-dir` on
// this replica's host, or deleted from the store (revocations are
// append-only: whoever deletes one from the store does not undo it while a
// replica holds it). It runs when the CA's list changes, when the store
// loses one, and at every heartbeat (a retry).
func (s *State) shareLocalRevocations(ctx context.Context) {
	for _, rv := range s.missingRevocations() {
		name := revocationName(rv)
		if err := putRevocation(ctx, s.backend, s.cfg.Key, s.cfg.Spec.Prefix, rv); err != nil {
			s.log.Warn("sharing a revocation failed; retrying", "revocation", name, "error", err)
			return
		}
		s.log.Info("shared a revocation the store lacked (made on this replica, or deleted from the store)", "revocation", name)
		s.mu.Lock()
		s.shared = maps.Clone(s.shared)
		s.shared[name] = rv
		s.mu.Unlock()
	}
}

// Revoke shares a revocation with every replica (and this one's CA, when
// it watches).
func (s *State) Revoke(ctx context.Context, rv ca.Revocation) error {
	return putRevocation(ctx, s.backend, s.cfg.Key, s.cfg.Spec.Prefix, rv)
}

func putRevocation(ctx context.Context, b backend, key Key, prefix string, rv ca.Revocation) error {
	body, err := json.Marshal(rv)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	name := revocationName(rv)
	if err := b.putRevocation(ctx, name, key.seal(prefix, revocationPath(name), body)); err != nil {
		return fmt.Errorf("state: revoke: %w", err)
	}
	return nil
}

// Replicas lists the replicas the shared state knows, this one marked
// Self, sorted by ID: those whose record is signed and held by the session
// it names.
func (s *State) Replicas(ctx context.Context) ([]Replica, error) {
	return listReplicas(ctx, s.backend, s.cfg.Key, s.cfg.Spec.Prefix, s.cfg.ID, s.cfg.Now())
}

func listReplicas(ctx context.Context, b backend, key Key, prefix, self string, now time.Time) ([]Replica, error) {
	values, err := b.replicas(ctx)
	if err != nil {
		return nil, fmt.Errorf("state: replicas: %w", err)
	}
	out := []Replica{}
	for _, v := range values {
		r, refused := openReplica(key, prefix, v, now)
		if refused != nil {
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
// session; it signs what it writes and reads only what is signed, with the
// replicas' key.
type Client struct {
	b      backend
	key    Key
	prefix string
	stop   context.CancelFunc
}

// Dial connects to the backend spec names; key is the replicas' state key.
func Dial(spec Spec, key Key, logger *slog.Logger) (*Client, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if !key.valid() {
		return nil, errNoKey
	}
	if logger == nil {
		logger = slog.Default()
	}
	spec = spec.withDefaults()
	b, err := newBackend(spec, "", key, logger)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	if z, ok := b.(*zkBackend); ok {
		go z.authenticate(ctx)
	}
	return &Client{b: b, key: key, prefix: spec.Prefix, stop: stop}, nil
}

// Revoke shares a revocation with every replica.
func (c *Client) Revoke(ctx context.Context, rv ca.Revocation) error {
	if z, ok := c.b.(*zkBackend); ok {
		select {
		case <-z.authed:
		case <-ctx.Done():
			return fmt.Errorf("state: zookeeper: %w", ctx.Err())
		}
	}
	return putRevocation(ctx, c.b, c.key, c.prefix, rv)
}

// Revocations reads every shared revocation once: the authentic, valid
// ones, and the refused ones (by key, with the reason).
func (c *Client) Revocations(ctx context.Context) ([]ca.Revocation, []UnreadableRecord, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []ca.Revocation
	var refused []UnreadableRecord
	got := make(chan struct{})
	var once sync.Once
	err := c.b.watchRevocations(ctx, func(values []value) {
		once.Do(func() {
			for _, v := range values {
				rv, r := openRevocation(c.key, c.prefix, v, time.Now())
				if r != nil {
					refused = append(refused, UnreadableRecord{Kind: UnreadableRevocation, Key: v.key, Reason: r.reason, Error: r.msg})
					continue
				}
				out = append(out, rv)
			}
			close(got)
			cancel()
		})
	})
	select {
	case <-got:
		ca.SortRevocations(out)
		return out, refused, nil
	default:
	}
	return nil, nil, cmp.Or(err, ctx.Err(), errors.New("state: no answer"))
}

// Replicas lists the replicas the shared state knows.
func (c *Client) Replicas(ctx context.Context) ([]Replica, error) {
	if z, ok := c.b.(*zkBackend); ok {
		select {
		case <-z.authed:
		case <-ctx.Done():
			return nil, fmt.Errorf("state: zookeeper: %w", ctx.Err())
		}
	}
	return listReplicas(ctx, c.b, c.key, c.prefix, "", time.Now())
}

// Close ends the connection.
func (c *Client) Close() {
	c.stop()
	c.b.close()
}
