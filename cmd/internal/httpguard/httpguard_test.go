package httpguard

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestHostAllowed(t *testing.T) {
	g := Guard(http.NotFoundHandler(), Options{AllowedHosts: []string{"CP.example.internal."}}).(*guard)
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:15014": true, "10.2.3.4:80": true, "[::1]:15014": true, "[::1]": true, "::1": true,
		"localhost": true, "LOCALHOST:15014": true, "localhost.": true, "cp.example.internal": true, "cp.example.internal.:15014": true,
		"":               true, // HTTP/1.0: no browser
		"rebind.example": false, "rebind.example:15014": false, "localhost.rebind.example": false, "127.0.0.1.nip.io": false,
		"example.internal": false, "x.cp.example.internal": false, "2130706433": false, "127.1": false,
	} {
		if got := g.hostAllowed(host); got != want {
			t.Errorf("Host %q: allowed %v, want %v", host, got, want)
		}
	}
}

func TestTokenAndOpenPaths(t *testing.T) {
	var refused []string
	h := Guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("data")) }), Options{
		Token: "s3cret", Open: func(p string) bool { return p == "/ready" }, Refused: func(r string) { refused = append(refused, r) },
	})
	serve := func(path string, header http.Header) (int, string) {
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+path, nil)
		for k, v := range header {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	for _, c := range []struct {
		path   string
		header http.Header
		want   int
	}{
		{"/ready", nil, 200},
		{"/debug/config", nil, 401},
		{"/debug/config", http.Header{"Authorization": {"Bearer s3cret"}}, 200},
		{"/debug/config", http.Header{"Authorization": {"bearer  s3cret "}}, 200},
		{"/debug/config", http.Header{"Authorization": {"Basic s3cret"}}, 401},
		{"/debug/config", http.Header{"Authorization": {"Bearer s3cre"}}, 401},
		{"/debug/config", http.Header{"Cookie": {CookieName + "=" + sessionValue("s3cret")}}, 200},
		{"/debug/config", http.Header{"Cookie": {CookieName + "=s3cret"}}, 401},
		{"/ui/?token=nope", nil, 401},
	} {
		if code, body := serve(c.path, c.header); code != c.want || (code != 200 && body == "data") {
			t.Errorf("%s %v: %d %q, want %d", c.path, c.header, code, body, c.want)
		}
	}
	if len(refused) != 5 {
		t.Errorf("refusals reported: %v", refused)
	}
}

// The listener holds at most n connections; closing one lets the next in.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitListener(inner, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, second := <-accepted, <-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted beyond the limit of 2")
	case <-time.After(200 * time.Millisecond):
	}
	if l.Open() != 2 {
		t.Errorf("Open() = %d, want 2", l.Open())
	}
	first.Close()
	first.Close() // a second Close releases nothing more
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the third connection was not accepted once one closed")
	}
	second.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range accepted {
	}
}
