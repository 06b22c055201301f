package consul_test

import (
	"strings"
	"testing"

	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/registries/consul"
	"github.com/vmesh/vmesh/store"
)

func TestConfigValidation(t *testing.T) {
	sink := adapter.NewSink(store.NewStore(), adapter.Meta{Type: "consul", Name: "c", Namespace: "default"}, "", nil, nil)
	for _, tc := range []struct {
		name    string
		cfg     consul.Config
		wantErr string
	}{
		{name: "no address", cfg: consul.Config{}, wantErr: "no address"},
		{name: "bad scheme", cfg: consul.Config{Address: "ftp://x:1"}, wantErr: "scheme"},
		{name: "cert without key", cfg: consul.Config{Address: "x:8501", TLS: consul.TLSConfig{CertFile: "c.pem"}}, wantErr: "certFile and keyFile"},
		{name: "missing CA file", cfg: consul.Config{Address: "https://x:8501", TLS: consul.TLSConfig{CAFile: "/nonexistent/ca.pem"}}, wantErr: "tls"},
		{name: "missing token file", cfg: consul.Config{Address: "x:8500", TokenFile: "/nonexistent/token"}, wantErr: "token file"},
		{name: "https with system roots", cfg: consul.Config{Address: "https://x:8501"}},
		{name: "plain", cfg: consul.Config{Address: "127.0.0.1:8500", Token: "t"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := consul.New(tc.cfg, sink, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("New error %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}
