package gatewayapi

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/vmesh/vmesh/store"
)

// SourceName names the Store source the Writer writes as: its objects are
// the generated VirtualServices, its status warnings what Convert could
// not apply.
const SourceName = "gateway-api"

// Source is the Store source the Writer writes as: generated objects,
// ranked as a registry's (an object a file defines under the same key
// wins).
func Source() store.Source {
	return store.Source{Name: SourceName, Class: store.ClassRegistry}
}

// Writer keeps the Store's generated Istio objects equal to what Convert
// makes of the Store's Gateway API objects. Run drives it.
type Writer struct {
	store  *store.Store
	after  []<-chan struct{}
	logger *slog.Logger
	synced chan struct{}
	// last are the warnings last reported (only Run's goroutine
	// touches it); written, so a config without Gateway API objects
	// never shows the source.
	last    []store.ConfigError
	written bool
}

// NewWriter returns a Writer for st that converts first once every channel
// of after is closed (the config sources' first loads), so the first
// routes a proxy gets already hold the generated ones.
func NewWriter(st *store.Store, logger *slog.Logger, after ...<-chan struct{}) (*Writer, error) {
	if st == nil {
		return nil, errors.New("gatewayapi: nil store")
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Writer{store: st, after: after, logger: logger, synced: make(chan struct{})}, nil
}

// Synced is closed once the first complete config has been converted.
func (w *Writer) Synced() <-chan struct{} { return w.synced }

// Run converts, then follows the Store's changes until ctx ends.
func (w *Writer) Run(ctx context.Context) error {
	sub := w.store.Subscribe()
	defer sub.Close()
	for _, c := range w.after {
		select {
		case <-c:
		case <-ctx.Done():
			return nil
		}
	}
	sub.Take()
	if err := w.sync(); err != nil {
		return err
	}
	close(w.synced)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.C():
			if !relevant(sub.Take()) {
				continue
			}
			if err := w.sync(); err != nil {
				return err
			}
		}
	}
}

// inputKinds are the kinds Convert reads.
var inputKinds = []store.Kind{
	store.KindServiceEntry, store.KindGatewayClass, store.KindKubernetesGateway, store.KindHTTPRoute,
	store.KindGRPCRoute, store.KindTCPRoute, store.KindTLSRoute, store.KindReferenceGrant,
}

func relevant(ch store.Changes) bool {
	for k := range ch.Keys {
		if slices.Contains(inputKinds, k.Kind) {
			return true
		}
	}
	return false
}

func (w *Writer) sync() error {
	out := Convert(w.store.Snapshot())
	if len(out.Objects) == 0 && len(out.Warnings) == 0 && !w.written {
		return nil
	}
	w.written = true
	if err := w.store.Replace(Source(), out.Objects); err != nil {
		w.logger.Error("gateway-api: generated objects refused", "err", err)
		return nil
	}
	if !slices.Equal(out.Warnings, w.last) {
		w.store.SetStatus(Source(), "", out.Warnings)
		w.last = out.Warnings
	}
	return nil
}
