// Command istio-mcp-server runs Istio's own MCP-over-xDS server (Istio
// 1.31's DiscoveryServer with its "api" generator over its in-memory config
// store, through pilot/test/xds's fake discovery server) and a scripted
// sequence on it: a VirtualService created, changed and deleted. It is
// vmesh's peer for issue 50 (vmesh reads MeshConfig configSources
// xds://HOST:PORT), in a module of its own so that Istio never enters
// vmesh's go.mod.
//
//	istio-mcp-server record -out DIR   # Istio's responses per step, SotW and delta, into DIR
//	istio-mcp-server live -vmesh BIN [-delta]  # vmesh serve as a child reading Istio's server
//
// record writes what Istio's server sends to a client that asks as
// istiod's configSources client does (node metadata GENERATOR: api): the
// DiscoveryResponses (SotW) and DeltaDiscoveryResponses (delta) of each
// step, as protojson, for vmesh's replay test (filestore/mcpsource). live
// starts `vmesh serve` with a mesh config whose configSources names
// Istio's server and checks, after each step, that vmesh's /debug/config
// holds the VirtualService as Istio's store does (or no longer holds it).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	networking "istio.io/api/networking/v1alpha3"
	"istio.io/istio/pilot/pkg/features"
	xdsfake "istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"
	istiolog "istio.io/istio/pkg/log"
)

// typeURL is the type vmesh's client and this script use.
var typeURL = gvk.VirtualService.String()

// nodeID is a node id of the form Istio's server parses (istiod's own
// configSources client sends one like it).
const nodeID = "sidecar~127.0.0.1~vmesh.istio-system~istio-system.svc.cluster.local"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: istio-mcp-server record -out DIR | live -vmesh BIN")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "record":
		err = record(os.Args[2:])
	case "live":
		err = live(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "istio-mcp-server:", err)
		os.Exit(1)
	}
}

// step is one change the script makes to Istio's config store.
type step struct {
	name  string
	apply func(s *xdsfake.FakeDiscoveryServer) error
	// dest is the destination host the VirtualService routes to after
	// the step, "" when it is gone.
	dest string
}

// virtualService is the script's VirtualService: requests for
// echo.mesh.internal go to dest.
func virtualService(dest string) config.Config {
	return config.Config{
		Meta: config.Meta{
			GroupVersionKind:  gvk.VirtualService,
			Name:              "echo",
			Namespace:         "default",
			Domain:            "cluster.local",
			Labels:            map[string]string{"app": "echo"},
			CreationTimestamp: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		},
		Spec: &networking.VirtualService{
			Hosts: []string{"echo.mesh.internal"},
			Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: dest}}},
			}},
		},
	}
}

func script() []step {
	return []step{
		{name: "initial"},
		{name: "create", dest: "echo-v2.mesh.internal", apply: func(s *xdsfake.FakeDiscoveryServer) error {
			_, err := s.Store().Create(virtualService("echo-v2.mesh.internal"))
			return err
		}},
		{name: "change", dest: "echo-v3.mesh.internal", apply: func(s *xdsfake.FakeDiscoveryServer) error {
			_, err := s.Store().Update(virtualService("echo-v3.mesh.internal"))
			return err
		}},
		{name: "delete", apply: func(s *xdsfake.FakeDiscoveryServer) error {
			return s.Store().Delete(gvk.VirtualService, "echo", "default", nil)
		}},
	}
}

// start runs Istio's fake discovery server on a loopback TCP port, with
// the api generator open to a plaintext client (ENABLE_XDS_API_GENERATOR_AUTH
// off; istiod restricts it to callers with a control-plane identity).
func start(f *failer) (*xdsfake.FakeDiscoveryServer, string) {
	for _, sc := range istiolog.Scopes() {
		sc.SetOutputLevel(istiolog.NoneLevel)
	}
	features.EnableXDSAPIGeneratorAuth = false
	var addr string
	s := xdsfake.NewFakeDiscoveryServer(f, xdsfake.FakeOptions{
		DebounceTime: 100 * time.Millisecond,
		ListenerBuilder: func() (net.Listener, error) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err == nil {
				addr = l.Addr().String()
			}
			return l, err
		},
	})
	return s, addr
}

// node is the node Istio's server sees: istiod's configSources client
// sends GENERATOR: api (pkg/adsc, pilot/pkg/bootstrap).
func node() (*core.Node, error) {
	md, err := structpb.NewStruct(map[string]any{"GENERATOR": "api", "NAMESPACE": "istio-system"})
	if err != nil {
		return nil, err
	}
	return &core.Node{Id: nodeID, Metadata: md}, nil
}

// recorded is the file record writes.
type recorded struct {
	Istio   string         `json:"istio"`
	TypeURL string         `json:"typeUrl"`
	Steps   []recordedStep `json:"steps"`
}

type recordedStep struct {
	Step string `json:"step"`
	// Dest is the destination the VirtualService routes to after the
	// step, "" when there is none.
	Dest  string            `json:"dest,omitempty"`
	SotW  []json.RawMessage `json:"sotw"`
	Delta []json.RawMessage `json:"delta"`
}

func record(args []string) error {
	fs := flag.NewFlagSet("record", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write istio-mcp.json into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-out is required")
	}
	f := &failer{}
	defer f.cleanup()
	s, addr := start(f)
	n, err := node()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ads := discovery.NewAggregatedDiscoveryServiceClient(cc)
	sotw, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	delta, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	if err := sotw.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, Node: n}); err != nil {
		return err
	}
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, Node: n}); err != nil {
		return err
	}
	sotwC := make(chan *discovery.DiscoveryResponse, 16)
	deltaC := make(chan *discovery.DeltaDiscoveryResponse, 16)
	errc := make(chan error, 2)
	go func() {
		for {
			r, err := sotw.Recv()
			if err != nil {
				errc <- fmt.Errorf("sotw: %w", err)
				return
			}
			// ACK, as a client does.
			_ = sotw.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
			sotwC <- r
		}
	}()
	go func() {
		for {
			r, err := delta.Recv()
			if err != nil {
				errc <- fmt.Errorf("delta: %w", err)
				return
			}
			_ = delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: r.GetNonce()})
			deltaC <- r
		}
	}()
	rec := recorded{Istio: "istio.io/istio v0.0.0-20260827124520-eed52ebb66ad (1.31), pilot/pkg/networking/apigen via pilot/test/xds.NewFakeDiscoveryServer", TypeURL: typeURL}
	mo := protojson.MarshalOptions{Indent: "  "}
	for _, st := range script() {
		if st.apply != nil {
			if err := st.apply(s); err != nil {
				return fmt.Errorf("step %s: %w", st.name, err)
			}
		}
		rs := recordedStep{Step: st.name, Dest: st.dest}
		// The first response of each stream, then whatever else comes
		// within a quiet second (Istio debounces 100 ms here).
		wait := 10 * time.Second
		for got := 0; ; got++ {
			select {
			case r := <-sotwC:
				b, err := mo.Marshal(r)
				if err != nil {
					return err
				}
				rs.SotW = append(rs.SotW, b)
			case r := <-deltaC:
				b, err := mo.Marshal(r)
				if err != nil {
					return err
				}
				rs.Delta = append(rs.Delta, b)
			case err := <-errc:
				return err
			case <-time.After(wait):
				if len(rs.SotW) == 0 && len(rs.Delta) == 0 {
					fmt.Fprintf(os.Stderr, "step %s: no response from Istio in %s\n", st.name, wait)
				}
				goto done
			}
			if len(rs.SotW) > 0 && len(rs.Delta) > 0 {
				wait = time.Second
			}
		}
	done:
		fmt.Fprintf(os.Stderr, "step %s: %d SotW, %d delta responses\n", st.name, len(rs.SotW), len(rs.Delta))
		rec.Steps = append(rec.Steps, rs)
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*out, "istio-mcp.json"), append(b, '\n'), 0o644)
}

// live runs vmesh serve against Istio's server and checks each step
// reaches vmesh's Store.
func live(args []string) error {
	fs := flag.NewFlagSet("live", flag.ContinueOnError)
	bin := fs.String("vmesh", "", "vmesh binary")
	delta := fs.Bool("delta", false, "vmesh reads Istio's server with delta ADS (--config-source-delta)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" {
		return errors.New("-vmesh is required")
	}
	f := &failer{}
	defer f.cleanup()
	s, addr := start(f)
	dir := f.TempDir()
	cfgDir := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	se := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.mesh.internal, echo-v2.mesh.internal, echo-v3.mesh.internal]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1}]
`
	if err := os.WriteFile(filepath.Join(cfgDir, "se.yaml"), []byte(se), 0o644); err != nil {
		return err
	}
	mesh := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(mesh, []byte("configSources:\n- address: xds://"+addr+"\n"), 0o644); err != nil {
		return err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return err
	}
	xdsAddr, _ := freeAddr()
	secAddr, _ := freeAddr()
	cmd := exec.Command(*bin, "serve", "--config-dir", cfgDir, "--mesh-config", mesh, "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", httpAddr, "--xds-addr", xdsAddr, "--secure-addr", secAddr, fmt.Sprintf("--config-source-delta=%t", *delta))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for _, st := range script() {
		if st.apply != nil {
			if err := st.apply(s); err != nil {
				return fmt.Errorf("step %s: %w", st.name, err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			dest, source, err := vmeshDest("http://" + httpAddr + "/debug/config")
			if err == nil && dest == st.dest && (st.dest == "" || strings.HasPrefix(source, "mcp:xds://")) {
				fmt.Printf("step %s: vmesh holds %s (from %s)\n", st.name, orNone(dest), orNone(source))
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("step %s: vmesh's VirtualService routes to %q (source %q, err %v), want %q", st.name, dest, source, err, st.dest)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	fmt.Println("PASS: Istio's MCP server fed vmesh a VirtualService created, changed and deleted")
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}

// vmeshDest reads vmesh's /debug/config: the destination host of the
// VirtualService default/echo, and its origin's source.
func vmeshDest(url string) (dest, source string, err error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "", err
	}
	var dc struct {
		Objects []struct {
			Kind, Namespace, Name string
			Origin                struct{ Source string }
			Spec                  json.RawMessage
		}
	}
	if err := json.Unmarshal(b, &dc); err != nil {
		return "", "", fmt.Errorf("%s: %w", url, err)
	}
	for _, o := range dc.Objects {
		if o.Kind != "VirtualService" || o.Namespace != "default" || o.Name != "echo" {
			continue
		}
		vs := &networking.VirtualService{}
		if err := protojson.Unmarshal(o.Spec, vs); err != nil {
			return "", "", err
		}
		return vs.GetHttp()[0].GetRoute()[0].GetDestination().GetHost(), o.Origin.Source, nil
	}
	return "", "", nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// failer is the test.Failer the fake discovery server wants: a failure
// ends the server.
type failer struct{ cleanups []func() }

func (f *failer) Fail()                          { panic("istio fake discovery server failed") }
func (f *failer) FailNow()                       { panic("istio fake discovery server failed") }
func (f *failer) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (f *failer) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (f *failer) Log(args ...any)                {}
func (f *failer) Logf(format string, a ...any)   {}
func (f *failer) Helper()                        {}
func (f *failer) Skip(args ...any)               { panic(fmt.Sprint(args...)) }
func (f *failer) Cleanup(fn func())              { f.cleanups = append(f.cleanups, fn) }
func (f *failer) TempDir() string {
	d, err := os.MkdirTemp("", "istio-mcp-server")
	if err != nil {
		panic(err)
	}
	f.cleanups = append(f.cleanups, func() { os.RemoveAll(d) })
	return d
}

func (f *failer) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	f.cleanups = nil
}
