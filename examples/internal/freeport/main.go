// Command freeport prints loopback TCP ports the kernel picked, one per
// line, for the examples' scripts to give servers that cannot bind port 0
// themselves (ZooKeeper, Consul, backends whose port goes into config
// written before they start). All the ports are held open together, so
// they are distinct, and released just before the command exits.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

func main() {
	n := 1
	if len(os.Args) > 1 {
		var err error
		if n, err = strconv.Atoi(os.Args[1]); err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "usage: freeport [N]")
			os.Exit(2)
		}
	}
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, "freeport:", err)
			os.Exit(1)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, p := range ports {
		fmt.Println(p)
	}
}
