package loadgen

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// loopbackReaderCommand makes the test binary BenchmarkLoopbackSendFloor's
// reader: it dials the address it is given that many times and reads every
// connection to its end.
const loopbackReaderCommand = "__loopback-reader"

func loopbackReader(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: %s ADDR CONNS", loopbackReaderCommand)
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return fmt.Errorf("connections %q: %w", args[1], err)
	}
	var wg sync.WaitGroup
	for range n {
		c, err := net.Dial("tcp", args[0])
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		})
	}
	wg.Wait()
	return nil
}

// BenchmarkLoopbackSendFloor measures what the kernel and Go's net package
// alone charge a server for sending one sidecar VirtualService change's
// bytes over loopback TCP: one write of a 317 KB route configuration (the
// size Istio's layout gives port 7070's routes in the harness's
// 1,000-service config) to each of 1,000 connections, read by another
// process as the harness's proxies are, with no gRPC, HTTP/2 or encoding.
// sender-ms/op is this process's CPU per change (the kernel runs much of
// the receiving side of loopback TCP in the sender's context too).
func BenchmarkLoopbackSendFloor(b *testing.B) {
	const (
		conns = 1000
		size  = 317 << 10
	)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	reader := exec.Command(os.Args[0], loopbackReaderCommand, ln.Addr().String(), strconv.Itoa(conns))
	reader.Stderr = os.Stderr
	if err := reader.Start(); err != nil {
		b.Fatal(err)
	}
	senders := make([]net.Conn, conns)
	for i := range senders {
		c, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		senders[i] = c
	}
	buf := make([]byte, size)
	b.SetBytes(conns * size)
	start := SelfCPU()
	for b.Loop() {
		for _, c := range senders {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(SelfCPU()-start)/float64(time.Millisecond)/float64(b.N), "sender-ms/op")
	for _, c := range senders {
		_ = c.Close()
	}
	if err := reader.Wait(); err != nil {
		b.Fatalf("reader: %v", err)
	}
}
