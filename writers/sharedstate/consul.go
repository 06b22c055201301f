package sharedstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/vmesh/vmesh/internal/retry"
)

// consulBackend keeps the shared state in Consul's KV store:
//
//	<prefix>/replicas/<id>                  this replica's record   (session)
//	<prefix>/registrations/<id>~<ns>~<name> its registrations       (session)
//	<prefix>/revocations/<kind>~<value>     revocations             (persistent)
//
// The session has a TTL and the "delete" behaviour: when it is invalidated
// (the replica stopped renewing it), Consul deletes its keys.
type consulBackend struct {
	spec   Spec
	id     string
	log    *slog.Logger
	client *api.Client

	mu  sync.Mutex
	sid string // the current session
}

func newConsul(s Spec, id string, log *slog.Logger) (*consulBackend, error) {
	cfg := api.DefaultNonPooledConfig()
	addr := s.Address
	if scheme, rest, ok := strings.Cut(addr, "://"); ok {
		cfg.Scheme, addr = scheme, rest
	}
	cfg.Address = addr
	if s.TokenFile != "" {
		tok, err := os.ReadFile(s.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("state: consul token file: %w", err)
		}
		cfg.Token = strings.TrimSpace(string(tok))
	}
	// Blocking queries hold a request open: no client timeout.
	cfg.HttpClient = &http.Client{}
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("state: consul %s: %w", s.Address, err)
	}
	return &consulBackend{spec: s, id: id, log: log, client: client}, nil
}

func (c *consulBackend) key(parts ...string) string {
	return c.spec.Prefix + "/" + strings.Join(parts, "/")
}

func (c *consulBackend) session() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sid
}

func (c *consulBackend) currentSession() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sid == "" {
		return "", errors.New("no consul session yet")
	}
	return c.sid, nil
}

// run creates the session and renews it every third of its TTL; when
// Consul no longer knows it (it expired while Consul was unreachable), it
// creates another.
func (c *consulBackend) run(ctx context.Context, sessions chan<- struct{}) error {
	b := retry.New(200*time.Millisecond, c.spec.TTL/2)
	var id string
	for ctx.Err() == nil {
		if id == "" {
			var err error
			id, _, err = c.client.Session().Create(&api.SessionEntry{
				Name: "vmesh replica " + c.id, TTL: c.spec.TTL.String(),
				Behavior: api.SessionBehaviorDelete, LockDelay: time.Millisecond,
			}, (&api.WriteOptions{}).WithContext(ctx))
			if err != nil {
				c.log.Warn("creating the consul session failed; retrying", "error", err)
				b.Wait(ctx)
				continue
			}
			b.Reset()
			c.mu.Lock()
			c.sid = id
			c.mu.Unlock()
			c.log.Info("consul session created", "session", id, "ttl", c.spec.TTL)
			select {
			case sessions <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.spec.TTL / 3):
		}
		entry, _, err := c.client.Session().Renew(id, (&api.WriteOptions{}).WithContext(ctx))
		switch {
		case ctx.Err() != nil:
		case err != nil:
			c.log.Warn("renewing the consul session failed; retrying", "session", id, "error", err)
		case entry == nil:
			c.log.Warn("consul session expired: this replica's registrations were deleted; writing them again", "session", id)
			id = ""
		}
	}
	return nil
}

func (c *consulBackend) acquire(ctx context.Context, key string, data []byte) error {
	session, err := c.currentSession()
	if err != nil {
		return err
	}
	ok, _, err := c.client.KV().Acquire(&api.KVPair{Key: key, Value: data, Session: session}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("consul put %s: %w", key, err)
	}
	if !ok {
		// Held by another session: if it is this replica's own from a
		// previous run (the same --replica-id, restarted before its old
		// session expired), end that session and take the key.
		if c.takeOver(ctx, key, session) {
			ok, _, err = c.client.KV().Acquire(&api.KVPair{Key: key, Value: data, Session: session}, (&api.WriteOptions{}).WithContext(ctx))
			if err == nil && ok {
				return nil
			}
		}
		return fmt.Errorf("consul put %s: key held by another session", key)
	}
	return nil
}

// takeOver destroys the session holding key when it is a previous session
// of this replica, and reports whether it did.
func (c *consulBackend) takeOver(ctx context.Context, key, current string) bool {
	pair, _, err := c.client.KV().Get(key, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || pair == nil || pair.Session == "" || pair.Session == current {
		return false
	}
	old, _, err := c.client.Session().Info(pair.Session, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || old == nil || old.Name != "vmesh replica "+c.id {
		return false
	}
	if _, err := c.client.Session().Destroy(old.ID, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return false
	}
	c.log.Info("ended this replica's session of a previous run", "session", old.ID)
	return true
}

func (c *consulBackend) putReplica(ctx context.Context, data []byte) error {
	return c.acquire(ctx, c.key("replicas", c.id), data)
}

func (c *consulBackend) putEntry(ctx context.Context, name string, data []byte) error {
	return c.acquire(ctx, c.key("registrations", name), data)
}

func (c *consulBackend) deleteEntry(ctx context.Context, name string) error {
	if _, err := c.client.KV().Delete(c.key("registrations", name), (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("consul delete: %w", err)
	}
	return nil
}

func (c *consulBackend) deleteReplica(ctx context.Context) error {
	_, err := c.client.KV().Delete(c.key("replicas", c.id), (&api.WriteOptions{}).WithContext(ctx))
	return err
}

// watchPrefix calls fn with every key under prefix after each change, with
// blocking queries; errors are retried with backoff and keep the last set.
func (c *consulBackend) watchPrefix(ctx context.Context, prefix string, fn func(api.KVPairs)) error {
	b := retry.New(100*time.Millisecond, 5*time.Second)
	var index uint64
	first := true
	for ctx.Err() == nil {
		pairs, meta, err := c.client.KV().List(prefix, (&api.QueryOptions{WaitIndex: index, WaitTime: time.Minute}).WithContext(ctx))
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("reading the shared state failed; keeping the last known state", "prefix", prefix, "error", err)
				b.Wait(ctx)
			}
			continue
		}
		b.Reset()
		if meta.LastIndex < index {
			index = 0 // Consul's index went back (a restored snapshot): read again.
			continue
		}
		if meta.LastIndex == index && !first {
			continue // the wait timed out
		}
		first = false
		index = meta.LastIndex
		fn(pairs)
	}
	return nil
}

// values names each pair by its key under prefix.
func values(prefix string, pairs api.KVPairs) []value {
	out := make([]value, 0, len(pairs))
	for _, p := range pairs {
		name := strings.TrimPrefix(p.Key, prefix)
		out = append(out, value{key: name, name: name, data: p.Value, session: p.Session})
	}
	return out
}

func (c *consulBackend) watchEntries(ctx context.Context, fn func([]value)) error {
	prefix := c.key("registrations") + "/"
	return c.watchPrefix(ctx, prefix, func(pairs api.KVPairs) { fn(values(prefix, pairs)) })
}

func (c *consulBackend) watchReplicas(ctx context.Context, fn func([]value)) error {
	prefix := c.key("replicas") + "/"
	return c.watchPrefix(ctx, prefix, func(pairs api.KVPairs) { fn(values(prefix, pairs)) })
}

func (c *consulBackend) putRevocation(ctx context.Context, name string, data []byte) error {
	if _, err := c.client.KV().Put(&api.KVPair{Key: c.key("revocations", name), Value: data}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("consul put: %w", err)
	}
	return nil
}

func (c *consulBackend) watchRevocations(ctx context.Context, fn func([]value)) error {
	prefix := c.key("revocations") + "/"
	return c.watchPrefix(ctx, prefix, func(pairs api.KVPairs) { fn(values(prefix, pairs)) })
}

func (c *consulBackend) replicas(ctx context.Context) ([]value, error) {
	prefix := c.key("replicas") + "/"
	pairs, _, err := c.client.KV().List(prefix, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return values(prefix, pairs), nil
}

func (c *consulBackend) close() {}
