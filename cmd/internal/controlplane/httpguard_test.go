package controlplane_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
)

// do sends one request to the control plane's HTTP port with the given
// Host header and extra headers, and returns the status and body.
func do(t *testing.T, cp *controlplane.ControlPlane, method, host, path string, header map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+cp.HTTPAddr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b), resp.Header
}

// TestFaultHTTPHostRebinding: a web page whose DNS name was rebound to the
// control plane's address (Host: rebind.example) reads nothing from the
// HTTP port: every path the server registers (the list comes from the
// server, so a new path cannot escape), and paths it does not, answer 421
// with a fixed message and none of the server's data, whatever the method.
// IP addresses, localhost and a name allowed with --http-allowed-host are
// served. Before, every Host was served.
func TestFaultHTTPHostRebinding(t *testing.T) {
	dir := t.TempDir()
	echoConfig(t, dir)
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.Pprof = true
	cfg.HTTP.AllowedHosts = []string{"cp.example.internal"}
	cp, _ := runPlane(t, cfg, "", nil)
	waitReady(t, cp)

	paths := cp.HTTPPaths()
	for _, want := range []string{"/ready", "/metrics", "/debug/config", "/ui/", "/webhook/git", "/debug/pprof/"} {
		if !slices.Contains(paths, want) {
			t.Fatalf("HTTPPaths %v lacks %s", paths, want)
		}
	}
	// The console's pages and stream are under /ui/; the rest are not
	// registered at all.
	paths = append(paths, "/ui/events", "/ui/services", "/ui/static/console.js", "/debug/config_dump?proxy=x", "/nothing-here")
	port := cp.HTTPAddr()[strings.LastIndex(cp.HTTPAddr(), ":")+1:]
	for _, host := range []string{"rebind.example", "rebind.example:" + port, "REBIND.example.", "localhost.rebind.example", "127.0.0.1.rebind.example:" + port, "evil"} {
		for _, path := range paths {
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				code, body, h := do(t, cp, method, host, path, nil)
				if code != http.StatusMisdirectedRequest {
					t.Errorf("%s %s with Host %s: %d, want 421", method, path, host, code)
				}
				if !strings.HasPrefix(body, "vmesh: this Host is not a name of this server") || len(body) > 300 ||
					strings.Contains(body, "echo") || strings.Contains(body, "vmesh_") || strings.Contains(body, "example") || strings.Contains(body, "evil") {
					t.Errorf("%s %s with Host %s: the refusal carries more than its message: %q", method, path, host, body)
				}
				if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
					t.Errorf("%s %s: Content-Type %q", method, path, ct)
				}
			}
		}
	}
	// The server's own names.
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LocalHost", "localhost.", "[::1]:" + port, "10.1.2.3", "cp.example.internal", "CP.example.internal:" + port} {
		for _, path := range []string{"/ready", "/debug/config", "/ui/", "/metrics"} {
			if code, body, _ := do(t, cp, http.MethodGet, host, path, nil); code != http.StatusOK {
				t.Errorf("GET %s with Host %s: %d %.200s, want 200", path, host, code, body)
			}
		}
	}
	// The refusals are counted.
	if _, body, _ := do(t, cp, http.MethodGet, "", "/metrics", nil); !strings.Contains(body, `vmesh_http_refused_total{reason="host"}`) ||
		strings.Contains(body, `vmesh_http_refused_total{reason="host"} 0`) {
		t.Errorf("refused requests not counted:\n%s", httpMetricLines(body))
	}
}

// TestHTTPToken: with --http-token-file every path but /ready, /version
// (and the git webhook when it has its own secret) needs the token, as a
// bearer header or as the session cookie a browser gets by opening a page
// once with ?token=. The port bound beyond loopback without a token is
// warning VM1020, in /debug/config and the warnings metric.
func TestHTTPToken(t *testing.T) {
	dir := t.TempDir()
	echoConfig(t, dir)
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "tok-5b1d0f-secret"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.HTTP.TokenFile = tokenFile
	cp, _ := runPlane(t, cfg, "", nil)
	waitReady(t, cp)

	bearer := map[string]string{"Authorization": "Bearer " + token}
	for _, path := range []string{"/debug/config", "/debug/syncz", "/metrics", "/ui/", "/ui/events", "/debug/registries", "/webhook/git"} {
		code, body, h := do(t, cp, http.MethodGet, "", path, nil)
		if code != http.StatusUnauthorized || !strings.Contains(body, "--http-token-file") || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("GET %s without the token: %d %q", path, code, body)
		}
		if code, _, _ := do(t, cp, http.MethodGet, "", path, map[string]string{"Authorization": "Bearer not-it"}); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
		}
	}
	for _, path := range []string{"/debug/config", "/metrics", "/ui/"} {
		if code, _, _ := do(t, cp, http.MethodGet, "", path, bearer); code != http.StatusOK {
			t.Errorf("GET %s with the token: %d, want 200", path, code)
		}
	}
	for _, path := range []string{"/ready", "/version"} {
		if code, _, _ := do(t, cp, http.MethodGet, "", path, nil); code != http.StatusOK {
			t.Errorf("GET %s without the token: %d, want 200 (probes)", path, code)
		}
	}
	// The Host check comes first: a rebinding page holding the token
	// still gets 421.
	if code, _, _ := do(t, cp, http.MethodGet, "rebind.example", "/debug/config", bearer); code != http.StatusMisdirectedRequest {
		t.Errorf("Host rebind.example with the token: %d, want 421", code)
	}

	// A browser: ?token= once, then the cookie.
	code, body, h := do(t, cp, http.MethodGet, "", "/ui/services?q=echo&token="+token, nil)
	cookie := h.Get("Set-Cookie")
	if code != http.StatusOK || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") ||
		strings.Contains(cookie, token) || !strings.Contains(body, `url=/ui/services?q=echo`) || strings.Contains(body, token) {
		t.Fatalf("?token=: %d, Set-Cookie %q, body %q", code, cookie, body)
	}
	session := strings.SplitN(cookie, ";", 2)[0]
	if code, body, _ := do(t, cp, http.MethodGet, "", "/ui/", map[string]string{"Cookie": session}); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Errorf("/ui/ with the session cookie: %d", code)
	}
	if code, _, _ := do(t, cp, http.MethodGet, "", "/ui/?token=wrong", nil); code != http.StatusUnauthorized {
		t.Errorf("?token=wrong: %d, want 401", code)
	}
	if code, _, _ := do(t, cp, http.MethodGet, "", "/ui/", map[string]string{"Cookie": "vmesh_session=" + token}); code != http.StatusUnauthorized {
		t.Errorf("the token itself as the cookie: %d, want 401", code)
	}

	// Beyond loopback: warned without a token, not with one.
	for _, c := range []struct {
		token string
		warn  bool
	}{{"", true}, {tokenFile, false}} {
		cfg := controlplane.DefaultConfig()
		cfg.ConfigDir = dir
		cfg.HTTP.TokenFile = c.token
		cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "0.0.0.0:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
		open, _ := runUntilCleanup(t, cfg, nil)
		var warned bool
		for _, st := range open.Store().Snapshot().Sources {
			for _, w := range st.Warnings {
				warned = warned || (w.Code == store.CodeHTTPPortUnauthenticated && st.Source == "http")
			}
		}
		if warned != c.warn {
			t.Errorf("0.0.0.0 with token file %q: warned %v, want %v", c.token, warned, c.warn)
		}
		port := open.HTTPAddr()[strings.LastIndex(open.HTTPAddr(), ":")+1:]
		req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+port+"/debug/config?kind=none", nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var dc filestore.DebugConfig
		err = json.NewDecoder(resp.Body).Decode(&dc)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(fmt.Sprint(dc), store.CodeHTTPPortUnauthenticated); got != c.warn {
			t.Errorf("/debug/config shows VM1020: %v, want %v", got, c.warn)
		}
	}
}

// TestFaultHTTPPortSaturation: clients holding every connection the HTTP
// port allows (idle keep-alives and console event streams) make new ones
// wait, a console stream beyond the cap gets 503, and meanwhile xDS on its
// own port keeps serving: a backend and a grpc-go client that start during
// the saturation get their config and call each other. A freed connection
// lets the next request through. Before, the port accepted without bound,
// up to the process's file descriptor limit.
func TestFaultHTTPPortSaturation(t *testing.T) {
	dir := t.TempDir()
	echoConfig(t, dir)
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.HTTP.MaxConnections, cfg.HTTP.MaxEventStreams = 6, 2
	cp, _ := runPlane(t, cfg, "", nil)
	waitReady(t, cp) // its keep-alive connection is closed below

	http.DefaultClient.CloseIdleConnections()
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	// dial opens a connection and sends one request on it; the answer
	// proves the server holds the connection.
	dial := func(path string) (net.Conn, *http.Response) {
		t.Helper()
		c, err := net.Dial("tcp", cp.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s on a held connection: %v", path, err)
		}
		return c, resp
	}
	for range cfg.HTTP.MaxEventStreams {
		_, resp := dial("/ui/events")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("event stream within the cap: %d", resp.StatusCode)
		}
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "retry:") {
			t.Fatalf("event stream: first line %q, %v", line, err)
		}
	}
	_, resp := dial("/ui/events")
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("an event stream beyond the cap: %d %q, want 503 with Retry-After", resp.StatusCode, body)
	}
	// Idle keep-alive connections take the remaining places.
	for len(held) < cfg.HTTP.MaxConnections {
		_, resp := dial("/ready")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	// A new request waits: it has no connection to the server.
	quick := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := quick.Get("http://" + cp.HTTPAddr() + "/ready"); err == nil {
		resp.Body.Close()
		t.Fatalf("a request beyond the connection cap was answered: %d", resp.StatusCode)
	}

	// xDS is on its own port: a backend and a client started now get
	// their config and call each other.
	b1 := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: "b1", Namespace: "default"})
	echoConfig(t, dir, b1)
	client := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "client", Namespace: "default"}, echoTarget)
	if id := xdstest.CallUntil(t, client, 30*time.Second); id != "b1" {
		t.Errorf("called %q, want b1", id)
	}

	// One connection closes: the next request is served.
	held[len(held)-1].Close()
	held = held[:len(held)-1]
	waitUntil(t, 10*time.Second, "a request served once a connection closed", func() bool {
		resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + cp.HTTPAddr() + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestFaultHTTPEventStreamLifetime: a console event stream ends after
// http.eventStreamLifetime (the browser's EventSource then opens a new
// one), so streams nobody closes do not pile up. Before, a stream lasted
// as long as its client kept it open.
func TestFaultHTTPEventStreamLifetime(t *testing.T) {
	dir := t.TempDir()
	echoConfig(t, dir)
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.HTTP.EventStreamLifetime = 500 * time.Millisecond
	cp, _ := runPlane(t, cfg, "", nil)
	waitReady(t, cp)
	start := time.Now()
	resp, err := http.Get("http://" + cp.HTTPAddr() + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		ended <- err
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the stream ended with %v, want a clean end", err)
		}
		if took := time.Since(start); took < cfg.HTTP.EventStreamLifetime {
			t.Errorf("the stream ended after %s, before its lifetime", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream outlived its lifetime (500ms) by 10s")
	}
}

// httpMetricLines returns the vmesh_http_ lines of a /metrics page.
func httpMetricLines(metrics string) string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "vmesh_http_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
