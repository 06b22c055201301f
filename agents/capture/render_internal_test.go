package capture

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// TestRulesGolden: the nft ruleset and the iptables argument vectors for
// Istio's defaults and for include/exclude lists, as reviewers read them.
// The netns tests install the same for real.
func TestRulesGolden(t *testing.T) {
	lists := Defaults()
	lists.IncludeOutboundIPRanges = []netip.Prefix{netip.MustParsePrefix("240.240.0.0/16"), netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00::/8")}
	lists.ExcludeOutboundIPRanges = []netip.Prefix{netip.MustParsePrefix("169.254.0.1/32")}
	lists.ExcludeOutboundPorts = []uint16{3306, 22, 3306}
	lists.IncludeInboundPorts = []uint16{8080, 9090}
	lists.ExcludeInboundPorts = []uint16{22}
	lists.DNSServers = []netip.Addr{netip.MustParseAddr("169.254.0.53"), netip.MustParseAddr("fd00::53")}
	for name, c := range map[string]Config{"defaults": Defaults(), "lists": lists} {
		t.Run(name, func(t *testing.T) {
			c = c.withDefaults()
			var b strings.Builder
			b.WriteString("# nft -f -\n" + nftRuleset(c))
			for _, v6 := range []bool{false, true} {
				bin := "iptables"
				if v6 {
					bin = "ip6tables"
				}
				b.WriteString("\n# " + bin + " -w -t nat ...\n")
				for _, r := range iptablesRules(c, v6) {
					b.WriteString(strings.Join(r, " ") + "\n")
				}
			}
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./agents/capture -run TestRulesGolden -update)", err)
			}
			if b.String() != string(want) {
				t.Errorf("rules differ from %s (-update to accept):\n%s", path, b.String())
			}
		})
	}
}
