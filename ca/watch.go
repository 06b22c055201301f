package ca

import (
	"context"
	"crypto/x509"
	"time"

	"github.com/vmesh/vmesh/ca/spiffe"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Run re-reads the revocation list every RevocationCheckInterval while it
// changes on disk, so a revocation written by another process (`vmesh ca
// revoke`) reaches the streams watched by WatchPeer within that interval.
// Revocations made through this CA reach them at once, Run or not. It
// returns when ctx ends.
func (c *CA) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.RevocationCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := c.revoked.refresh(); err != nil {
				// The watchers re-check and fail closed; say why once per try.
				c.log.Warn("revocation list unreadable", "error", err)
			}
		}
	}
}

// PeerWatch is the watch of one gRPC call's client certificate (WatchPeer).
type PeerWatch struct {
	ca     *CA
	ctx    context.Context
	cancel context.CancelCauseFunc
	leaf   *x509.Certificate
	id     spiffe.Identity
}

// WatchPeer keeps checking the client certificate of the gRPC call in ctx
// for as long as the call lasts. Its Context is derived from ctx and is
// cancelled, with the rejection (*Error, ReasonCertExpired or
// ReasonCertRevoked) as its context.Cause, as soon as the certificate
// expires or a revocation of its serial or of its identity reaches the CA.
// A call without a valid certificate gets a context cancelled at once with
// the reason. Call Stop when the call ends.
func (c *CA) WatchPeer(ctx context.Context) *PeerWatch {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &PeerWatch{ca: c, ctx: wctx, cancel: cancel}
	certs, err := peerCertificates(ctx)
	if err == nil {
		w.id, err = c.VerifyPeerCertificates(certs)
	}
	if err != nil {
		cancel(err)
		return w
	}
	w.leaf = certs[0]
	go func() {
		timer := time.NewTimer(untilExpiry(w.leaf, c.cfg.Now()))
		defer timer.Stop()
		for {
			changed := c.revoked.changes()
			if w.Check() != nil {
				return
			}
			select {
			case <-wctx.Done():
				return
			case <-changed:
			case <-timer.C:
				// An injected clock may run behind: look again, at most
				// once a second.
				timer.Reset(max(untilExpiry(w.leaf, c.cfg.Now()), time.Second))
			}
		}
	}()
	return w
}

// Context ends when the certificate is refused (or the call ends).
func (w *PeerWatch) Context() context.Context { return w.ctx }

// Check checks the certificate now, the revocation list included (re-read
// if the file changed): call it before each response, so that a revocation
// another process wrote stops responses even before Run notices it. A
// refused certificate cancels the Context.
func (w *PeerWatch) Check() error {
	if err := context.Cause(w.ctx); w.ctx.Err() != nil {
		return err
	}
	err := w.ca.checkLive(w.leaf, w.ca.cfg.Now())
	if err == nil {
		err = w.ca.checkRevoked(w.leaf, w.id)
	}
	if err != nil {
		w.cancel(err)
		return context.Cause(w.ctx)
	}
	return nil
}

// Stop ends the watch.
func (w *PeerWatch) Stop() { w.cancel(context.Canceled) }

// untilExpiry is how long from now until leaf is past its NotAfter.
func untilExpiry(leaf *x509.Certificate, now time.Time) time.Duration {
	return leaf.NotAfter.Sub(now) + time.Millisecond
}

// peerCertificates returns the client certificate chain of the gRPC call in
// ctx.
func peerCertificates(ctx context.Context) ([]*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, reject(ReasonNoCredentials, "no peer in context", nil)
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return nil, reject(ReasonNoCredentials, "the connection carries no client certificate", nil)
	}
	return ti.State.PeerCertificates, nil
}
