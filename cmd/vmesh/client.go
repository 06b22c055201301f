package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/vmesh/vmesh/cmd/vmesh/internal/configdiff"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/xds"
)

// httpClient talks to the 15014 servers of running replicas.
var httpClient = &http.Client{Timeout: 10 * time.Second}

// serverURL turns "127.0.0.1:15014" or "http://host:15014" into a base URL.
func serverURL(s string) string {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	return strings.TrimRight(s, "/")
}

// Where the vmesh commands that call a control plane's HTTP port find its
// bearer token (vmesh serve --http-token-file): the token itself in
// $VMESH_TOKEN, else the file named by --token-file or $VMESH_TOKEN_FILE.
const (
	tokenEnv     = "VMESH_TOKEN"
	tokenFileEnv = "VMESH_TOKEN_FILE"
)

// clientToken returns the HTTP port's token, "" when none is configured.
func clientToken() (string, error) {
	if t := strings.TrimSpace(os.Getenv(tokenEnv)); t != "" {
		return t, nil
	}
	file := os.Getenv(tokenFileEnv)
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("token file (--token-file, $%s): %w", tokenFileEnv, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// getJSON GETs a replica's path and decodes its JSON answer into into.
func getJSON(server, path string, into any) error {
	return doJSON(http.MethodGet, server, path, into)
}

// postJSON POSTs to a replica's path and decodes its JSON answer into into.
func postJSON(server, path string, into any) error {
	return doJSON(http.MethodPost, server, path, into)
}

// doJSON sends one request with no body to a replica's path, with the
// client's bearer token if it has one, and decodes the JSON answer into into.
// Every error names the method and URL; a status other than 200 carries the
// start of the answer's body.
func doJSON(method, server, path string, into any) error {
	url := serverURL(server) + path
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	token, err := clientToken()
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	return nil
}

// syncz reads a replica's connected proxies.
func syncz(server string) ([]xds.SyncStatus, error) {
	var out []xds.SyncStatus
	return out, getJSON(server, "/debug/syncz", &out)
}

// servedCommit returns the git commit a replica serves.
func servedCommit(server string) (string, error) {
	var dc filestore.DebugConfig
	if err := getJSON(server, "/debug/config?kind=none", &dc); err != nil {
		return "", err
	}
	if dc.Commit == "" {
		return "", fmt.Errorf("%s serves no git source", server)
	}
	return dc.Commit, nil
}

// connectedTargets returns the proxies connected to a replica, each with
// the resources it holds (its /debug/config_dump) when the replica still
// has it.
func connectedTargets(server string) ([]configdiff.Target, error) {
	st, err := syncz(server)
	if err != nil {
		return nil, err
	}
	out := make([]configdiff.Target, 0, len(st))
	seen := map[string]bool{}
	for _, s := range st {
		if seen[s.ID] {
			continue // one proxy, several streams
		}
		seen[s.ID] = true
		p := &xds.Proxy{ID: s.ID, Kind: s.Kind, Namespace: s.Namespace, ServiceAccount: s.ServiceAccount}
		if s.Labels != "" {
			p.Labels = map[string]string{}
			for _, kv := range strings.Split(s.Labels, ",") {
				k, v, _ := strings.Cut(kv, "=")
				p.Labels[k] = v
			}
		}
		t := configdiff.Target{Proxy: p}
		var dump xds.ConfigDump
		if err := getJSON(server, "/debug/config_dump?proxy="+url.QueryEscape(s.ID), &dump); err == nil && dump.Proxy != nil {
			t.Proxy = dump.Proxy
			t.Held = heldOf(dump)
		}
		out = append(out, t)
	}
	return out, nil
}

// diffType maps a /debug/config_dump type name to the diff's.
func diffType(t string) (string, bool) {
	switch t {
	case "LDS":
		return "listener", true
	case "RDS":
		return "route", true
	case "CDS":
		return "cluster", true
	case "EDS":
		return "endpoint", true
	}
	return "", false
}

// heldOf returns what a proxy's streams hold, by the diff's type names.
func heldOf(dump xds.ConfigDump) map[string]map[string]bool {
	held := map[string]map[string]bool{}
	for _, s := range dump.Streams {
		for t, names := range s.Versions {
			typ, ok := diffType(t)
			if !ok || len(names) == 0 {
				continue
			}
			if held[typ] == nil {
				held[typ] = map[string]bool{}
			}
			for n := range names {
				held[typ][n] = true
			}
		}
	}
	return held
}
