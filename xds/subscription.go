package xds

import (
	"maps"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// subscription is one stream's state for one type: the names it asks for,
// whether it asks for everything, and what it holds (name → version). vmesh
// owns it outright: its SotW and delta servers (sotw.go, delta.go) create
// and update it in the stream's goroutine, and the cache reads it while the
// stream has a watch of that type open and changes what it holds only
// through the answers it sends (heldUpdate). It implements
// go-control-plane's cachev3.Subscription only so that the cache interface
// can carry it; no map of go-control-plane's is read or altered.
//
// Name rules follow the xDS protocol as go-control-plane v0.14 implements
// them (pkg/server/stream/v3): "*" subscribes to everything; a first
// request naming nothing does too ("legacy wildcard") until a request names
// something.
type subscription struct {
	// mu guards the changes of names, wildcard and held against readers
	// outside the stream (the debug dump, heldSnapshot); the stream's own
	// goroutine and the cache read without it (see above).
	mu       sync.Mutex
	names    map[string]struct{}
	wildcard bool
	// legacy is set while an empty request may still mean wildcard.
	legacy bool
	held   map[string]string
	// seq counts the changes of held, so the cache can tell whether the
	// stream holds what it last answered and nothing else happened since.
	seq uint64
	// node is the node the stream's last watch of the type was read from
	// and proxy the Proxy read from it. go-control-plane hands a request
	// that carries no node the stream's first one (Envoy under Istio's
	// bootstrap and gRPC send it once), so an ACK is not parsed again.
	// Only the stream's goroutine touches them.
	node  *corev3.Node
	proxy *Proxy
}

// proxyOf returns the Proxy of node n (ProxyFromNode), read once for as
// long as the stream's requests carry the same node.
func (s *subscription) proxyOf(n *corev3.Node) (*Proxy, error) {
	if s.proxy != nil && s.node == n {
		return s.proxy, nil
	}
	p, err := ProxyFromNode(n)
	if err != nil {
		return nil, err
	}
	s.node, s.proxy = n, p
	return p, nil
}

const explicitWildcard = "*"

// newSotwSubscription is a state-of-the-world stream's first request of a
// type.
func newSotwSubscription(names []string, legacy bool) *subscription {
	s := &subscription{names: map[string]struct{}{}, wildcard: len(names) == 0 && legacy, legacy: legacy, held: map[string]string{}}
	s.setNames(names)
	return s
}

// newDeltaSubscription is a delta stream's first request of a type, with
// the versions the client says it holds (a reconnecting client).
func newDeltaSubscription(subscribe, unsubscribe []string, initial map[string]string, legacy bool) *subscription {
	s := &subscription{names: map[string]struct{}{}, wildcard: len(subscribe) == 0 && legacy, legacy: legacy, held: map[string]string{}}
	for n, v := range initial {
		s.held[n] = v
	}
	s.update(subscribe, unsubscribe)
	return s
}

// ReturnedResources is what the stream holds. The cache does not alter it.
func (s *subscription) ReturnedResources() map[string]string { return s.held }

// SubscribedResources are the names the stream asks for.
func (s *subscription) SubscribedResources() map[string]struct{} { return s.names }

// IsWildcard reports whether the stream asks for every resource.
func (s *subscription) IsWildcard() bool { return s.wildcard }

// setNames applies a state-of-the-world request's full name list. Without
// a wildcard, what the stream no longer asks for is no longer held, so a
// later request for it is answered even when its version did not change.
func (s *subscription) setNames(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.legacy {
		if len(names) == 0 {
			return // still the legacy wildcard
		}
		s.legacy = false
	}
	set := make(map[string]struct{}, len(names))
	wildcard := false
	for _, n := range names {
		if n == explicitWildcard {
			wildcard = true
		} else {
			set[n] = struct{}{}
		}
	}
	if !wildcard {
		for n := range s.held {
			if _, ok := set[n]; !ok {
				delete(s.held, n)
				s.seq++
			}
		}
	}
	s.wildcard, s.names = wildcard, set
}

// update applies a delta request's subscriptions, then its
// unsubscriptions. A name unsubscribed while the stream is a wildcard
// stays held with version "", so the next answer either sends it again
// (it still exists) or says it was removed; any other unsubscribed name is
// no longer held.
func (s *subscription) update(subscribe, unsubscribe []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.legacy {
		if len(subscribe) == 0 {
			return // still the legacy wildcard
		}
		s.legacy = false
	}
	for _, n := range subscribe {
		if n == explicitWildcard {
			s.wildcard = true
			continue
		}
		s.names[n] = struct{}{}
	}
	for _, n := range unsubscribe {
		if n == explicitWildcard {
			s.wildcard = false
			continue
		}
		if _, ok := s.names[n]; ok && s.wildcard {
			s.held[n] = ""
			s.seq++
		} else if _, ok := s.held[n]; ok {
			delete(s.held, n)
			s.seq++
		}
		delete(s.names, n)
	}
}

// heldAnswer is an answer that changes what a stream holds once delivered.
type heldAnswer interface {
	// nextHeld is what the stream holds once the answer is delivered:
	// the held map changed in place, or a new one.
	nextHeld() map[string]string
	// markDelivered records that the answer reached the stream.
	markDelivered()
}

// plainAnswer is an answer of another cache (tests' go-control-plane raw
// responses): the stream holds its map from then on.
type plainAnswer map[string]string

func (p plainAnswer) nextHeld() map[string]string { return p }
func (plainAnswer) markDelivered()                {}

// deliver records that answer a was put on the stream.
func (s *subscription) deliver(a heldAnswer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = a.nextHeld()
	s.seq++
	a.markDelivered()
}

// heldSnapshot is a copy of what the stream holds (name → version), for
// readers outside the stream's goroutine.
func (s *subscription) heldSnapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.held)
}
