package xds_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// outcome is one RPC's result: the backend that answered, or the code and
// message of the failure.
type outcome struct {
	id   string
	code codes.Code
	msg  string
}

func callOnce(client testpb.TestServiceClient) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
	if err != nil {
		return outcome{code: status.Code(err), msg: status.Convert(err).Message()}
	}
	return outcome{id: resp.GetServerId(), code: codes.OK}
}

// pollUntil calls until cond holds for a batch of calls, failing after a
// minute: grpc-go waits for the CDS resource of a cluster a route names up
// to its resource timeout (15 s) before it decides the cluster does not
// exist and applies the route.
func pollUntil(t *testing.T, client testpb.TestServiceClient, what string, cond func([]outcome) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var batch []outcome
		for range 20 {
			batch = append(batch, callOnce(client))
		}
		if cond(batch) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last calls: %v", what, batch)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMissingDestinationFailsItsShare (issue 15 item 6): a real grpc-go
// client routed 50/50 between an existing subset and one no
// DestinationRule defines has about half its RPCs fail UNAVAILABLE, naming
// the missing cluster, and the rest reach the backend (not all of them, as
// when vmesh dropped the missing destination); routed to the missing
// subset alone, every RPC fails instead of silently reaching the service.
func TestMissingDestinationFailsItsShare(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := store.NewStore()
	m := startMesh(t, ctx, st)
	<-m.srv.Ready()
	b1 := startBackend(t, m.addr, "b1", &failOnce{seen: map[string]bool{}})

	objs := func(http string) []*store.Object {
		t.Helper()
		files := serviceEntryYAML() + "---\n" + destinationRuleYAML() + "---\n" + workloadEntryYAML("b1", "echo", "v1", b1.port)
		if http != "" {
			files += "---\n" + virtualServiceYAML(http)
		}
		out, errs := filestore.Decode("config.yaml", []byte(files))
		if len(errs) > 0 {
			t.Fatalf("decode: %v", errs)
		}
		return out
	}
	apply := func(http string) {
		t.Helper()
		if err := st.Replace(testSource, objs(http)); err != nil {
			t.Fatal(err)
		}
	}
	const missingCluster = "outbound|7070|v3|" + echoHost

	apply(`  - route:
    - destination: {host: echo.mesh.internal, subset: v1}
`)
	client := dial(t, m.addr, "client-1", echoHost+":7070")
	pollUntil(t, client, "v1 answering", func(b []outcome) bool {
		for _, o := range b {
			if o.id != "b1" {
				return false
			}
		}
		return true
	})

	t.Run("split with a missing subset", func(t *testing.T) {
		apply(`  - route:
    - destination: {host: echo.mesh.internal, subset: v1}
      weight: 50
    - destination: {host: echo.mesh.internal, subset: v3}
      weight: 50
`)
		pollUntil(t, client, "the split applied", func(b []outcome) bool {
			for _, o := range b {
				if o.code == codes.Unavailable {
					return true
				}
			}
			return false
		})
		const n = 200
		ok, failed := 0, 0
		for range n {
			o := callOnce(client)
			switch {
			case o.code == codes.OK && o.id == "b1":
				ok++
			case o.code == codes.Unavailable:
				failed++
				if !strings.Contains(o.msg, missingCluster) {
					t.Errorf("failure %q does not name the missing cluster %s", o.msg, missingCluster)
				}
			default:
				t.Fatalf("call: %+v, want b1 or UNAVAILABLE", o)
			}
		}
		t.Logf("%d calls: %d reached b1, %d UNAVAILABLE", n, ok, failed)
		if ok == 0 || failed == 0 {
			t.Fatalf("%d reached the backend and %d failed, want both (the missing subset's share fails, the rest succeeds)", ok, failed)
		}
	})

	t.Run("only the missing subset", func(t *testing.T) {
		apply(`  - route:
    - destination: {host: echo.mesh.internal, subset: v3}
`)
		pollUntil(t, client, "the route to the missing subset applied", func(b []outcome) bool {
			for _, o := range b {
				if o.code != codes.Unavailable {
					return false
				}
			}
			return true
		})
		for range 200 {
			if o := callOnce(client); o.code != codes.Unavailable {
				t.Fatalf("call: %+v, want UNAVAILABLE (no call may reach the service)", o)
			}
		}
	})
}
