// Command vmesh-load is vmesh's load harness: it generates a config of S
// services × E endpoints and V VirtualServices, serves it with vmesh and,
// for comparison, with go-control-plane serving the same pre-built
// resources (its SnapshotCache, and its LinearCache + MuxCache) and with
// Istio's own DiscoveryServer (tools/istio-load-server), each in a child
// process; connects N simulated ADS proxies over loopback and prints how
// long changes take to be ACKed by every affected proxy, the bytes sent,
// and the server's CPU and memory.
//
//	vmesh-load -services 1000 -endpoints 10 -virtual-services 100 -proxies 1000
//	vmesh-load -proxies 10000 -delta 1 -envoy 0 -servers vmesh
//	vmesh-load -proxies 100 -envoy 1 -shape sidecar-vm -servers vmesh   # Envoy sidecars, one VM (IP) each
//	vmesh-load -source git -services 200 -proxies 100
//	vmesh-load -source zookeeper -zookeeper 127.0.0.1:2181 -services 200 -proxies 100
//	vmesh-load -servers vmesh,istio,baseline,linear -istio-server /tmp/istio-load-server -envoy 0
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vmesh/vmesh/cmd/vmesh-load/internal/loadgen"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == loadgen.ChildCommand {
		if err := loadgen.ChildMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "vmesh-load server:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "vmesh-load:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	o := loadgen.DefaultOptions()
	fs := flag.NewFlagSet("vmesh-load", flag.ContinueOnError)
	fs.IntVar(&o.Size.Services, "services", o.Size.Services, "ServiceEntries (one gRPC port each)")
	fs.IntVar(&o.Size.Endpoints, "endpoints", o.Size.Endpoints, "WorkloadEntries per service (1..99)")
	fs.IntVar(&o.Size.VirtualServices, "virtual-services", o.Size.VirtualServices, "services with a VirtualService and DestinationRule")
	fs.IntVar(&o.Size.Namespaces, "namespaces", o.Size.Namespaces, "namespaces for services and proxies")
	fs.IntVar(&o.Proxies, "proxies", o.Proxies, "simulated proxies (ADS streams)")
	fs.Float64Var(&o.DeltaFraction, "delta", o.DeltaFraction, "share of proxies on delta xDS (rest: state of the world)")
	fs.Float64Var(&o.EnvoyFraction, "envoy", o.EnvoyFraction, "share of proxies subscribing like Envoy (rest: like proxyless gRPC)")
	fs.IntVar(&o.ListenersPerProxy, "listeners", o.ListenersPerProxy, "services each proxyless proxy dials")
	fs.IntVar(&o.StreamsPerConn, "streams-per-conn", o.StreamsPerConn, "proxy streams sharing one connection")
	fs.IntVar(&o.Changes, "changes", o.Changes, "changes of each kind to measure")
	fs.IntVar(&o.Burst, "burst", o.Burst, "then a burst of this many endpoint changes made evenly over 1 s: server CPU and bytes per change (source dir only)")
	fs.DurationVar(&o.DebounceQuiet, "debounce", o.DebounceQuiet, "vmesh xDS push debounce (quiet period)")
	fs.DurationVar(&o.ChangeTimeout, "change-timeout", o.ChangeTimeout, "how long to wait for one change's ACKs")
	fs.DurationVar(&o.ConnectTimeout, "connect-timeout", o.ConnectTimeout, "how long to wait for all proxies to sync")
	fs.IntVar(&o.ConnectParallel, "connect-parallel", o.ConnectParallel, "proxies connecting at once")
	fs.BoolVar(&o.Pprof, "pprof", o.Pprof, "serve /debug/pprof on vmesh's HTTP port")
	shape := fs.String("shape", string(loadgen.ShapeMixed), "what the Envoy-like proxies are: mixed (proxyless gRPC nodes subscribing like Envoy), sidecar-vm (Envoy sidecars, one simulated VM each: own IP and workload name), sidecar-shared (Envoy sidecars all on one IP) or router (replicas of one ingress gateway, every VirtualService bound to its Gateway)")
	source := fs.String("source", string(o.Source), "where vmesh reads the services: dir (files it watches), git (a local bare repository; changes are commits, pushes and webhook calls) or zookeeper (endpoints as Dubbo providers; needs -zookeeper)")
	fs.StringVar(&o.ZooKeeper, "zookeeper", "", "host:port of a running ZooKeeper, for -source zookeeper (the harness registers its providers under a root node of its own and deletes it at the end)")
	kinds := fs.String("kinds", "virtualservice,endpoint", "kinds of change to measure, in order: virtualservice, endpoint")
	servers := fs.String("servers", strings.Join(o.Servers, ","), "servers to measure, in order: vmesh, baseline (go-control-plane SnapshotCache), linear (go-control-plane LinearCache + MuxCache), istio (Istio's DiscoveryServer; needs -istio-server)")
	fs.StringVar(&o.IstioServer, "istio-server", "", "path of the tools/istio-load-server binary, for -servers istio (make istio-load-server)")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file (- for stdout)")
	profile := fs.String("cpuprofile", "", "with -pprof: write a CPU profile of vmesh taken during the changes to this file")
	heapAfter := fs.String("heapprofile-after", "", "with -pprof: write a heap profile of vmesh taken once the changes are done to this file (against -heapprofile's: what the changes allocated)")
	heapProfile := fs.String("heapprofile", "", "with -pprof: write a heap profile of vmesh taken once its proxies are synced to this file")
	connectProfile := fs.String("connect-cpuprofile", "", "with -pprof: write a CPU profile of vmesh taken from the first proxy's connection for 10 s (the connection storm) to this file")
	harnessProfile := fs.String("harness-cpuprofile", "", "write a CPU profile of the harness (the simulated proxies) taken during vmesh's changes to this file")
	quiet := fs.Bool("q", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Source = loadgen.Source(*source)
	o.Shape = loadgen.Shape(*shape)
	o.Servers = strings.Split(*servers, ",")
	o.Kinds = strings.Split(*kinds, ",")
	if !*quiet {
		o.Progress = os.Stderr
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	need := loadgen.FileLimitNeed(o)
	if n, err := loadgen.RaiseFileLimit(need); err != nil {
		fmt.Fprintf(os.Stderr, "vmesh-load: raising the open-file limit: %v (limit %d)\n", err, n)
	} else if n < need {
		return fmt.Errorf("the open-file limit is %d; %d proxies need about %d (raise the hard limit: ulimit -Hn, or run as root)", n, o.Proxies, need)
	}
	// Profiles of vmesh are fetched from its /debug/pprof: each needs -pprof.
	profiles := []struct {
		flag, path string
		hook       func(path string) func(context.Context, *loadgen.Child) func()
		onConnect  bool
	}{
		{"cpuprofile", *profile, func(p string) func(context.Context, *loadgen.Child) func() {
			return loadgen.ProfileServer(p, 20*time.Second, o.Progress)
		}, false},
		{"connect-cpuprofile", *connectProfile, func(p string) func(context.Context, *loadgen.Child) func() {
			return loadgen.ProfileServer(p, 10*time.Second, o.Progress)
		}, true},
		{"heapprofile", *heapProfile, func(p string) func(context.Context, *loadgen.Child) func() {
			return loadgen.HeapProfileWhenSynced(p, o.Progress)
		}, false},
		{"heapprofile-after", *heapAfter, func(p string) func(context.Context, *loadgen.Child) func() {
			return loadgen.HeapProfileAfterChanges(p, o.Progress)
		}, false},
	}
	for _, pr := range profiles {
		if pr.path == "" {
			continue
		}
		if !o.Pprof {
			return fmt.Errorf("-%s needs -pprof", pr.flag)
		}
		path, err := filepath.Abs(pr.path)
		if err != nil {
			return err
		}
		if pr.onConnect {
			o.OnConnect = loadgen.BothHooks(o.OnConnect, pr.hook(path))
		} else {
			o.OnServer = loadgen.BothHooks(o.OnServer, pr.hook(path))
		}
	}
	if *harnessProfile != "" {
		o.OnServer = loadgen.BothHooks(o.OnServer, loadgen.ProfileHarnessDuringChanges(*harnessProfile, 20*time.Second, o.Progress))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := loadgen.Run(ctx, o)
	if rep != nil && len(rep.Servers) > 0 {
		if terr := rep.WriteTable(os.Stdout); terr != nil && err == nil {
			err = terr
		}
		if *jsonOut != "" {
			if jerr := writeJSON(*jsonOut, rep); jerr != nil && err == nil {
				err = jerr
			}
		}
	}
	return err
}

func writeJSON(path string, rep *loadgen.Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = os.Stdout.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
