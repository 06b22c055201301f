// Package split is what the examples' proxyless gRPC clients share: the
// grpc-go xDS bootstrap vmesh expects, dialling xds:///host:port, and a loop
// that prints the live traffic split, one line per interval:
//
//	v1  80% ################      v2  20% ####                  (350 calls, 0 failed)
package split

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"
)

// Bootstrap is the grpc-go xDS bootstrap of a proxyless application (see the
// README for the node metadata vmesh reads).
func Bootstrap(xdsAddr, id, namespace string, labels map[string]string) []byte {
	md := map[string]any{"GENERATOR": "grpc", "NAMESPACE": namespace}
	if len(labels) > 0 {
		md["LABELS"] = labels
	}
	b, err := json.Marshal(map[string]any{
		"xds_servers":                            []any{map[string]any{"server_uri": xdsAddr, "channel_creds": []any{map[string]any{"type": "insecure"}}, "server_features": []string{"xds_v3"}}},
		"node":                                   map[string]any{"id": id, "metadata": md},
		"server_listener_resource_name_template": "xds.vmesh.io/grpc/lds/inbound/%s",
	})
	if err != nil {
		panic(err) // static shapes only
	}
	return b
}

// Dial connects to xds:///target through vmesh as node id in namespace.
func Dial(xdsAddr, id, namespace, target string) (*grpc.ClientConn, error) {
	res, err := xds.NewXDSResolverWithConfigForTesting(Bootstrap(xdsAddr, id, namespace, nil))
	if err != nil {
		return nil, fmt.Errorf("xds resolver: %w", err)
	}
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(res))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return cc, nil
}

// Call makes one call and names what answered it (a version, an instance).
type Call func(ctx context.Context) (label string, err error)

// Print calls in a loop until ctx ends and prints the split every interval.
// It returns the counts of every interval it printed.
func Print(ctx context.Context, out io.Writer, every time.Duration, call Call) []map[string]int {
	var splits []map[string]int
	tick := time.NewTicker(every)
	defer tick.Stop()
	cur, failed := map[string]int{}, 0
	for {
		select {
		case <-ctx.Done():
			return splits
		case <-tick.C:
			fmt.Fprintln(out, Render(cur, failed))
			splits = append(splits, cur)
			cur, failed = map[string]int{}, 0
		default:
		}
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		label, err := call(callCtx)
		cancel()
		if err != nil {
			failed++
			time.Sleep(20 * time.Millisecond)
			continue
		}
		cur[label]++
		time.Sleep(2 * time.Millisecond)
	}
}

// Render draws one interval: each label's share, sorted by label, then the
// totals.
func Render(split map[string]int, failed int) string {
	total := 0
	for _, n := range split {
		total += n
	}
	if total == 0 {
		return fmt.Sprintf("  no successful calls (%d failed)", failed)
	}
	var b strings.Builder
	for _, label := range slices.Sorted(maps.Keys(split)) {
		pct := 100 * split[label] / total
		fmt.Fprintf(&b, "  %s %3d%% %-20s", label, pct, strings.Repeat("#", pct/5))
	}
	fmt.Fprintf(&b, "  (%d calls, %d failed)", total, failed)
	return b.String()
}
