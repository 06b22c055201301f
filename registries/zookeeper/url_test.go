package zookeeper_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/registries/zookeeper"
)

// dubboNode encodes a provider URL the way Dubbo names the node.
func dubboNode(raw string) string { return url.QueryEscape(raw) }

func TestParseProviderURL(t *testing.T) {
	for _, tc := range []struct {
		name    string
		raw     string
		wantErr string
		check   func(t *testing.T, p *zookeeper.Provider)
	}{
		{
			name: "plain dubbo url",
			raw:  "dubbo://10.0.0.1:20880/org.apache.dubbo.demo.DemoService?anyhost=true&application=demo-provider&dubbo=2.0.2&interface=org.apache.dubbo.demo.DemoService&methods=sayHello,sayHelloAsync&pid=77&side=provider&timestamp=1690000000000",
			check: func(t *testing.T, p *zookeeper.Provider) {
				if p.Protocol != "dubbo" || p.Host != "10.0.0.1" || p.Port != 20880 || p.Interface != "org.apache.dubbo.demo.DemoService" ||
					p.Application != "demo-provider" || p.Group != "" || p.Version != "" || p.Weight != 0 {
					t.Errorf("got %+v", p)
				}
				l := p.Labels()
				if l["application"] != "demo-provider" || l["side"] != "provider" || l["anyhost"] != "true" {
					t.Errorf("labels %v", l)
				}
				if _, ok := l["methods"]; ok {
					t.Errorf("methods list is not a valid label value: %v", l)
				}
			},
		},
		{
			name: "group version weight tri",
			raw:  "tri://10.0.0.2:50051/com.acme.Pay?group=gold&version=1.2.0&weight=50&interface=com.acme.Pay",
			check: func(t *testing.T, p *zookeeper.Provider) {
				if p.Protocol != "tri" || p.Group != "gold" || p.Version != "1.2.0" || p.Weight != 50 {
					t.Errorf("got %+v", p)
				}
			},
		},
		{
			name: "interface from path",
			raw:  "dubbo://10.0.0.3:20880/com.acme.Path?side=provider",
			check: func(t *testing.T, p *zookeeper.Provider) {
				if p.Interface != "com.acme.Path" {
					t.Errorf("interface %q", p.Interface)
				}
			},
		},
		{name: "no port", raw: "dubbo://10.0.0.1/com.acme.X", wantErr: "address"},
		{name: "port out of range", raw: "dubbo://10.0.0.1:70000/com.acme.X", wantErr: "bad address"},
		{name: "no interface", raw: "dubbo://10.0.0.1:20880/?side=provider", wantErr: "no interface"},
		{name: "bad weight", raw: "dubbo://10.0.0.1:20880/com.acme.X?weight=heavy", wantErr: "weight"},
		{name: "no scheme", raw: "10.0.0.1:20880", wantErr: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := zookeeper.ParseProviderURL(dubboNode(tc.raw))
			if tc.check == nil {
				if err == nil {
					t.Fatalf("ParseProviderURL(%q) = %+v, want an error", tc.raw, p)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %q does not mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
	if _, err := zookeeper.ParseProviderURL("%zz"); err == nil {
		t.Error("bad escape must fail")
	}
}

func TestInterfaceHost(t *testing.T) {
	for _, tc := range []struct{ iface, group, version, suffix, want string }{
		{iface: "org.apache.dubbo.demo.DemoService", want: "org.apache.dubbo.demo.demoservice"},
		{iface: "org.apache.dubbo.demo.DemoService", group: "pay", version: "1.0.0", want: "org.apache.dubbo.demo.demoservice.g-pay.v-1-0-0"},
		{iface: "org.apache.dubbo.demo.DemoService", version: "1.0.0", want: "org.apache.dubbo.demo.demoservice.v-1-0-0"},
		{iface: "com.acme.Outer$Inner_Svc", group: "A_B", suffix: "dubbo.local", want: "com.acme.outer-inner-svc.g-a-b.dubbo.local"},
	} {
		got := zookeeper.InterfaceHost(tc.iface, tc.group, tc.version, tc.suffix)
		if got != tc.want {
			t.Errorf("InterfaceHost(%q, %q, %q, %q) = %q, want %q", tc.iface, tc.group, tc.version, tc.suffix, got, tc.want)
		}
	}
	if got := zookeeper.ApplicationHost("Shop_Provider", ""); got != "shop-provider.dubbo" {
		t.Errorf("ApplicationHost = %q", got)
	}
}

func TestParseInstance(t *testing.T) {
	data := `{"name":"demo","id":"10.0.0.5:20880","address":"10.0.0.5","port":20880,"sslPort":null,
	"payload":{"@class":"org.apache.dubbo.registry.zookeeper.ZookeeperInstance","id":"10.0.0.5:20880","name":"demo",
	"metadata":{"dubbo.endpoints":"[{\"port\":20880,\"protocol\":\"dubbo\"},{\"port\":50051,\"protocol\":\"tri\"}]",
	"dubbo.metadata.revision":"f82a9a86","dubbo.metadata.storage-type":"local"}},"serviceType":"DYNAMIC"}`
	in, err := zookeeper.ParseInstance("demo", "10.0.0.5:20880", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if in.Address != "10.0.0.5" || in.Port != 20880 || in.Revision != "f82a9a86" || len(in.Endpoints) != 2 ||
		in.Endpoints[1] != (zookeeper.Endpoint{Port: 50051, Protocol: "tri"}) {
		t.Errorf("got %+v", in)
	}
	noEps, err := zookeeper.ParseInstance("demo", "10.0.0.6:20881", []byte(`{"address":"10.0.0.6","port":20881,"payload":{"metadata":{}}}`))
	if err != nil || len(noEps.Endpoints) != 1 || noEps.Endpoints[0] != (zookeeper.Endpoint{Port: 20881, Protocol: "dubbo"}) {
		t.Errorf("instance without dubbo.endpoints: %+v, %v", noEps, err)
	}
	if _, err := zookeeper.ParseInstance("demo", "x", []byte(`{"address":""}`)); err == nil {
		t.Error("instance without address must fail")
	}
	if _, err := zookeeper.ParseInstance("demo", "x", []byte(`not json`)); err == nil {
		t.Error("bad JSON must fail")
	}
}

func FuzzParseProviderURL(f *testing.F) {
	f.Add(dubboNode("dubbo://10.0.0.1:20880/a.B?group=g&version=1&weight=3"))
	f.Add("dubbo%3A%2F%2F%5B%3A%3A1%5D%3A1%2Fx")
	f.Add("%")
	f.Fuzz(func(t *testing.T, node string) {
		p, err := zookeeper.ParseProviderURL(node)
		if err != nil {
			return
		}
		if p.Port == 0 || p.Host == "" || p.Interface == "" {
			t.Fatalf("accepted incomplete provider %+v", p)
		}
		host := zookeeper.InterfaceHost(p.Interface, p.Group, p.Version, "")
		if len(host) > 253 || strings.Contains(host, "..") {
			t.Fatalf("host %q is not a DNS name", host)
		}
		for k, v := range p.Labels() {
			if !adapter.IsLabelKey(k) || !adapter.IsLabelValue(v) {
				t.Fatalf("invalid label %q=%q", k, v)
			}
		}
	})
}
