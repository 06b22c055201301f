package xds_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	security "istio.io/api/security/v1beta1"

	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// A push logs no config problem: config the model does not use is a
// warning found when it is read, and logged once per change by its source
// (filestore: TestDirSourceLogsWarningsOnce), never at a push.
func TestPushLogsNoConfigProblem(t *testing.T) {
	var logs testenv.LogBuffer
	srv, err := xds.NewServer(xds.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	st := store.NewStore()
	feed, err := model.NewFeed(st, model.FeedSettings{DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx, feed) }()
	defer func() { cancel(); <-done }()
	<-srv.Ready()

	bad := &store.Object{Key: store.Key{Kind: store.KindAuthorizationPolicy, Namespace: "demo", Name: "audit"},
		Spec: &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_AUDIT}}
	pushes := func() int { return strings.Count(logs.String(), `msg="pushed config"`) }
	for i := range 3 {
		objs := []*store.Object{bad, seObj(fmt.Sprintf("s%d", i), fmt.Sprintf("s%d.internal", i), "s")}
		before := pushes()
		if err := st.Replace(testSource, objs); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a push", func() bool { return pushes() > before })
	}
	if n := strings.Count(logs.String(), `level=WARN`); n != 0 {
		t.Fatalf("%d warnings logged over %d pushes, want none:\n%s", n, pushes(), logs.String())
	}
}
