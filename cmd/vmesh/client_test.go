package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDoJSONErrorsNameMethodAndURL: a refused GET or POST names its method
// and URL and carries the answer's status and body; a 200 decodes.
func TestDoJSONErrorsNameMethodAndURL(t *testing.T) {
	t.Setenv(tokenEnv, "s3cret")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/ok" {
			_, _ = w.Write([]byte(`{"method":"` + r.Method + `"}`))
			return
		}
		http.Error(w, "no commit is baking", http.StatusConflict)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	for _, c := range []struct {
		method string
		call   func(string, string, any) error
	}{{"GET", getJSON}, {"POST", postJSON}} {
		var got struct{ Method string }
		if err := c.call(host, "/ok", &got); err != nil || got.Method != c.method {
			t.Errorf("%s /ok: %+v, %v; want method %s", c.method, got, err, c.method)
		}
		err := c.call(host, "/debug/rollout/abort", &got)
		want := c.method + " " + srv.URL + "/debug/rollout/abort: 409 Conflict: no commit is baking"
		if err == nil || err.Error() != want {
			t.Errorf("%s error = %v, want %q", c.method, err, want)
		}
	}
}
