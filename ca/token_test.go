package ca_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/ca"
)

func TestTokenRoundTrip(t *testing.T) {
	c, _, _ := newTestCA(t, nil)
	raw, created, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart", WorkloadGroup: "cart-vms", TTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.VerifyToken(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got.Identity != testID || got.WorkloadGroup != "cart-vms" || got.ID == "" || got.ID != created.ID {
		t.Fatalf("claims = %+v", got)
	}
	if len(got.Audience) != 1 || got.Audience[0] != ca.DefaultTokenAudience {
		t.Fatalf("audience = %q, want [%q]", got.Audience, ca.DefaultTokenAudience)
	}
	if d := got.Expiry.Sub(got.NotBefore); d != 2*time.Hour {
		t.Fatalf("token lifetime = %s, want 2h", d)
	}
	// Two tokens for the same identity have distinct ids.
	raw2, _, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		t.Fatal(err)
	}
	got2, err := c.VerifyToken(raw2)
	if err != nil {
		t.Fatal(err)
	}
	if got2.ID == got.ID {
		t.Fatal("two tokens share an id")
	}
	if d := got2.Expiry.Sub(got2.NotBefore); d != ca.DefaultTokenTTL {
		t.Fatalf("default token lifetime = %s, want %s", d, ca.DefaultTokenTTL)
	}
}

func TestCreateTokenRejectsBadRequests(t *testing.T) {
	c, _, _ := newTestCA(t, nil)
	for _, tc := range []struct {
		name string
		req  ca.TokenRequest
		want string
	}{
		{name: "no namespace", req: ca.TokenRequest{ServiceAccount: "a"}, want: "namespace"},
		{name: "no service account", req: ca.TokenRequest{Namespace: "a"}, want: "service account"},
		{name: "slash in sa", req: ca.TokenRequest{Namespace: "a", ServiceAccount: "b/c"}, want: "not allowed"},
		{name: "bad workload group", req: ca.TokenRequest{Namespace: "a", ServiceAccount: "b", WorkloadGroup: "x/y"}, want: "workload group"},
		{name: "ttl over max", req: ca.TokenRequest{Namespace: "a", ServiceAccount: "b", TTL: ca.DefaultMaxTokenTTL + time.Hour}, want: "exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := c.CreateToken(tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// tamper rewrites one claim in the payload of a compact JWS, keeping the
// original signature.
func tamper(t *testing.T, raw, claim string, value any) string {
	t.Helper()
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		t.Fatal(err)
	}
	m[claim] = value
	payload, _ = json.Marshal(m)
	parts[1] = base64.RawURLEncoding.EncodeToString(payload)
	return strings.Join(parts, ".")
}

// TestVerifyTokenRejections is the negative list of issue 5 for tokens: each
// case must fail with its own specific reason.
func TestVerifyTokenRejections(t *testing.T) {
	clock := newTestClock()
	c, _, _ := newTestCA(t, func(cfg *ca.Config) { cfg.Now = clock.Now })
	other, _, _ := newTestCA(t, nil) // a different CA: a different key

	mint := func(c *ca.CA, req ca.TokenRequest) string {
		t.Helper()
		if req.Namespace == "" {
			req.Namespace, req.ServiceAccount = "shop", "cart"
		}
		raw, _, err := c.CreateToken(req)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	good := mint(c, ca.TokenRequest{})

	// An expired token: minted two hours ago with a one hour lifetime.
	clock.Add(-2 * time.Hour)
	expired := mint(c, ca.TokenRequest{TTL: time.Hour})
	clock.Add(2 * time.Hour)

	header := strings.Split(good, ".")[0]
	noneAlg := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + strings.Split(good, ".")[1] + "."
	hsAlg := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + strings.Split(good, ".")[1] + "." + strings.Split(good, ".")[2]

	for _, tc := range []struct {
		name   string
		token  string
		want   error
		detail string
	}{
		{name: "expired", token: expired, want: ca.ErrTokenExpired, detail: "expired at"},
		{name: "not yet valid", token: mint(c, ca.TokenRequest{NotBefore: clock.Now().Add(time.Hour)}), want: ca.ErrTokenNotYetValid, detail: "not valid before"},
		{name: "wrong audience", token: mint(c, ca.TokenRequest{Audience: "someone-else"}), want: ca.ErrTokenAudience, detail: `"someone-else"`},
		{name: "wrong signature (another CA's key)", token: mint(other, ca.TokenRequest{}), want: ca.ErrTokenSignature, detail: "signed by key"},
		{name: "tampered service account", token: tamper(t, good, "sa", "admin"), want: ca.ErrTokenSignature, detail: "does not verify"},
		{name: "tampered expiry", token: tamper(t, good, "exp", clock.Now().Add(1000*time.Hour).Unix()), want: ca.ErrTokenSignature, detail: "does not verify"},
		{name: "tampered signature", token: good[:len(good)-4] + flip(good[len(good)-4:]), want: ca.ErrTokenSignature},
		{name: "alg none", token: noneAlg, want: ca.ErrTokenMalformed, detail: "ES256"},
		{name: "alg swapped to HS256", token: hsAlg, want: ca.ErrTokenMalformed, detail: "ES256"},
		{name: "header only", token: header, want: ca.ErrTokenMalformed},
		{name: "garbage", token: "not-a-token", want: ca.ErrTokenMalformed},
		{name: "empty", token: "", want: ca.ErrNoCredentials},
		{name: "oversized", token: strings.Repeat("a", ca.MaxTokenSize+1), want: ca.ErrTokenMalformed, detail: "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims, err := c.VerifyToken(tc.token)
			if err == nil {
				t.Fatalf("token accepted: %+v", claims)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want reason %s", err, tc.want.(*ca.Error).Reason)
			}
			if !strings.HasPrefix(err.Error(), string(tc.want.(*ca.Error).Reason)) {
				t.Fatalf("message %q does not start with its reason", err)
			}
			if tc.detail != "" && !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("message %q does not say %q", err, tc.detail)
			}
		})
	}
	// The untouched token is still good: the cases above failed for their
	// own reasons, not because the CA rejects everything.
	if _, err := c.VerifyToken(good); err != nil {
		t.Fatalf("good token rejected: %v", err)
	}
}

func TestTokenAcceptedAudiencesAreConfigurable(t *testing.T) {
	c, _, _ := newTestCA(t, func(cfg *ca.Config) { cfg.TokenAudiences = []string{"vmesh-ca", "legacy"} })
	raw, _, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.VerifyToken(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got.Audience[0] != "vmesh-ca" {
		t.Fatalf("default audience = %q, want the first accepted one", got.Audience)
	}
	legacy, _, _ := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart", Audience: "legacy"})
	if _, err := c.VerifyToken(legacy); err != nil {
		t.Fatalf("second accepted audience rejected: %v", err)
	}
	istio, _, _ := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart", Audience: "istio-ca"})
	if _, err := c.VerifyToken(istio); !errors.Is(err, ca.ErrTokenAudience) {
		t.Fatalf("audience not in the accepted list: err = %v", err)
	}
}

func TestTokenFromSameKeyVerifiesInAnotherProcess(t *testing.T) {
	// The CLI (vmesh token create) and the server load the same data dir.
	c, cfg, _ := newTestCA(t, nil)
	raw, _, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.New(cfg, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.VerifyToken(raw); err != nil {
		t.Fatalf("token from the same data dir rejected: %v", err)
	}
}

func flip(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
	}
	return string(b)
}
