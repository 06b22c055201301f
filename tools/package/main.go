// Command package builds vmesh's Debian packages with nfpm used as a
// library (github.com/goreleaser/nfpm/v2), from a binary built by
// `make build` and the files under debian/. It is its own module so that
// nfpm never enters vmesh's dependency graph. See README.md.
//
//	go run . -binary ../../bin/vmesh -version "$(git describe --always --dirty)" -out ../../dist
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unicode"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

const (
	maintainer = "vmesh maintainers <vmesh@example.com>"
	homepage   = "https://github.com/vmesh/vmesh"
	license    = "Apache-2.0"
	unitDir    = "/usr/lib/systemd/system"
)

// packages lists what `make package` builds: the control plane and the agent,
// each with its own copy of the one vmesh binary (see README.md for why).
func packages(binary string) []*nfpm.Info {
	return []*nfpm.Info{
		{
			Name:        "vmesh",
			Description: "vmesh control plane: xDS, SPIFFE CA and Istio-style config for VM fleets\nServes xDS to Envoy and proxyless gRPC from a directory of Istio YAML, a git\nrepository and the fleet's registries (Consul, ZooKeeper/Dubbo), and is the\nCA of the mesh. Runs as vmesh.service under the vmesh system user.",
			Overridables: nfpm.Overridables{
				Depends: []string{"passwd"},
				Contents: files.Contents{
					{Source: binary, Destination: "/usr/bin/vmesh", FileInfo: &files.ContentFileInfo{Mode: 0o755}},
					{Source: "debian/vmesh/vmesh.service", Destination: unitDir + "/vmesh.service", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
					{Source: "debian/vmesh/vmesh.yaml", Destination: "/etc/vmesh/vmesh.yaml", Type: files.TypeConfigNoReplace, FileInfo: &files.ContentFileInfo{Mode: 0o640}},
					{Destination: "/etc/vmesh/mesh", Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
				},
				Scripts: nfpm.Scripts{PostInstall: "debian/vmesh/postinst", PreRemove: "debian/vmesh/prerm", PostRemove: "debian/vmesh/postrm"},
			},
		},
		{
			Name:        "vmesh-agent",
			Description: "vmesh agent for a VM in the mesh\nGets and rotates the workload's SPIFFE certificate, serves SDS and an xDS\nproxy to Envoy, writes the proxyless gRPC bootstrap, probes the workload and\nregisters the VM with the control plane. Runs as vmesh-agent.service once an\nonboarding bundle (vmesh vm bundle) is in /etc/vmesh/bundle.",
			Overridables: nfpm.Overridables{
				Contents: files.Contents{
					{Source: binary, Destination: "/usr/lib/vmesh-agent/vmesh", FileInfo: &files.ContentFileInfo{Mode: 0o755}},
					{Source: "debian/vmesh-agent/vmesh-agent.service", Destination: unitDir + "/vmesh-agent.service", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
					{Source: "debian/vmesh-agent/vmesh-agent.default", Destination: "/etc/default/vmesh-agent", Type: files.TypeConfigNoReplace, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
					{Destination: "/etc/vmesh/bundle", Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Mode: 0o700}},
				},
				Scripts: nfpm.Scripts{PostInstall: "debian/vmesh-agent/postinst", PreRemove: "debian/vmesh-agent/prerm", PostRemove: "debian/vmesh-agent/postrm"},
			},
		},
	}
}

// debVersion turns `git describe --always --dirty` output into a Debian
// version, which must start with a digit and sorts "~" before anything:
// v1.2.0 -> 1.2.0, v1.2.0-3-gabc1234-dirty -> 1.2.0+3.gabc1234.dirty,
// abc1234-dirty (no tag yet) -> 0~gitabc1234.dirty.
func debVersion(describe string) string {
	v := strings.TrimPrefix(strings.TrimSpace(describe), "v")
	if v == "" {
		return "0~dev"
	}
	if !unicode.IsDigit(rune(v[0])) || !strings.ContainsRune(v, '.') {
		return "0~git" + strings.ReplaceAll(v, "-", ".")
	}
	if base, rest, ok := strings.Cut(v, "-"); ok {
		return base + "+" + strings.ReplaceAll(rest, "-", ".")
	}
	return v
}

func build(info *nfpm.Info, version, arch, outDir string) (string, error) {
	info.Version, info.VersionSchema = debVersion(version), "none"
	info.Arch, info.Platform = arch, "linux"
	info.Maintainer, info.Homepage, info.License = maintainer, homepage, license
	info.Section, info.Priority = "net", "optional"
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", fmt.Errorf("%s: %w", info.Name, err)
	}
	if err := nfpm.Validate(info); err != nil {
		return "", fmt.Errorf("%s: %w", info.Name, err)
	}
	path := filepath.Join(outDir, deb.Default.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("%s: %w", info.Name, err)
	}
	return path, f.Close()
}

func main() {
	binary := flag.String("binary", "../../bin/vmesh", "the vmesh binary (from make build)")
	version := flag.String("version", "", "the version, as git describe --always --dirty prints it")
	arch := flag.String("arch", runtime.GOARCH, "the binary's architecture (GOARCH)")
	outDir := flag.String("out", "../../dist", "where the .deb files go")
	flag.Parse()
	if err := run(*binary, *version, *arch, *outDir); err != nil {
		fmt.Fprintln(os.Stderr, "package:", err)
		os.Exit(1)
	}
}

func run(binary, version, arch, outDir string) error {
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("binary: %w (run make build first)", err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for _, info := range packages(binary) {
		path, err := build(info, version, arch, outDir)
		if err != nil {
			return err
		}
		fmt.Println(path)
	}
	return nil
}
