// Package httpguard guards `vmesh serve`'s HTTP port (15014): it answers
// only requests whose Host is one of the server's own names (a web page
// that rebinds its DNS name to the control plane's address is refused with
// 421), asks for a bearer token when one is configured, and caps the
// connections the port holds at once.
package httpguard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
)

// Refusal reasons, as Options.Refused receives them.
const (
	ReasonHost  = "host"  // a Host that is not one of the server's names (421)
	ReasonToken = "token" // no or a wrong bearer token (401)
)

// CookieName is the cookie a browser gets once it opened a page with
// ?token=TOKEN; it carries a value derived from the token, not the token.
const CookieName = "vmesh_session"

// Options configure Guard.
type Options struct {
	// AllowedHosts are the names, besides localhost and IP addresses,
	// that requests may carry in their Host header (without the port).
	AllowedHosts []string
	// Token, when not empty, must come with every request but those Open
	// allows: as "Authorization: Bearer TOKEN", or the session cookie a
	// browser gets by opening any page once with ?token=TOKEN.
	Token string
	// Open reports whether a path is served without the token (probes,
	// the version, a webhook with its own secret).
	Open func(path string) bool
	// Refused, when set, is told the reason of every refused request.
	Refused func(reason string)
	// HostFlag and TokenFlag name the settings in refusal messages.
	HostFlag, TokenFlag string
}

// Guard wraps next with the Host check and, when Options.Token is set, the
// token check.
func Guard(next http.Handler, o Options) http.Handler {
	g := &guard{next: next, o: o, allowed: map[string]bool{}}
	for _, h := range o.AllowedHosts {
		g.allowed[normalHost(h)] = true
	}
	if o.Token != "" {
		g.session = sessionValue(o.Token)
	}
	return g
}

type guard struct {
	next    http.Handler
	o       Options
	allowed map[string]bool
	session string // the cookie value that stands for the token
}

func (g *guard) refuse(w http.ResponseWriter, reason string, code int, msg string) {
	if g.o.Refused != nil {
		g.o.Refused(reason)
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if code == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="vmesh"`)
	}
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hostAllowed(r.Host) {
		// The Host is not echoed: it is the caller's, and a page reading
		// this answer learns nothing from it.
		g.refuse(w, ReasonHost, http.StatusMisdirectedRequest, fmt.Sprintf(
			"vmesh: this Host is not a name of this server (a DNS rebinding guard): use an IP address or localhost, or allow the name with %s", cmpOr(g.o.HostFlag, "--http-allowed-host")))
		return
	}
	if g.session == "" || (g.o.Open != nil && g.o.Open(r.URL.Path)) || g.authorized(r) {
		g.next.ServeHTTP(w, r)
		return
	}
	if q := r.URL.Query(); q.Has("token") && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		if !equal(q.Get("token"), g.o.Token) {
			g.refuse(w, ReasonToken, http.StatusUnauthorized, "vmesh: wrong token")
			return
		}
		g.startSession(w, r, q)
		return
	}
	g.refuse(w, ReasonToken, http.StatusUnauthorized, fmt.Sprintf(
		"vmesh: this path needs the token of %s: send \"Authorization: Bearer TOKEN\" (vmesh commands: --token-file FILE or VMESH_TOKEN); in a browser, open /ui/?token=TOKEN once", cmpOr(g.o.TokenFlag, "--http-token-file")))
}

// authorized reports whether r carries the token or the session cookie.
func (g *guard) authorized(r *http.Request) bool {
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, tok, ok := strings.Cut(auth, " ")
		return ok && strings.EqualFold(scheme, "Bearer") && equal(strings.TrimSpace(tok), g.o.Token)
	}
	if c, err := r.Cookie(CookieName); err == nil {
		return equal(c.Value, g.session)
	}
	return false
}

var sessionPage = template.Must(template.New("session").Parse(`<!doctype html>
<meta charset="utf-8"><meta http-equiv="refresh" content="0;url={{.}}"><title>vmesh</title>
<p>Signed in. <a href="{{.}}">Continue</a>.</p>
`))

// startSession answers a request that carried the right ?token=: it sets
// the session cookie and sends the browser on to the same page without the
// token in its address. The page reloads itself rather than redirecting,
// so the reload is same-site even when a link from elsewhere opened it and
// the SameSite=Strict cookie goes with it.
func (g *guard) startSession(w http.ResponseWriter, r *http.Request, q url.Values) {
	q.Del("token")
	next := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: g.session, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	_ = sessionPage.Execute(w, next.String())
}

// hostAllowed reports whether a request's Host names this server: an IP
// address (a rebinding page always comes through a DNS name), localhost or
// an allowed name. An empty Host (HTTP/1.0) is no browser's.
func (g *guard) hostAllowed(hostport string) bool {
	h := normalHost(hostport)
	if h == "" || h == "localhost" || g.allowed[h] {
		return true
	}
	_, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
	return err == nil
}

// normalHost returns the host of a Host header or name, without port or
// trailing dot, in lower case.
func normalHost(hostport string) string {
	h := strings.TrimSpace(hostport)
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// equal compares two secrets in constant time (their lengths included).
func equal(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// sessionValue derives the session cookie's value from the token.
func sessionValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("vmesh console session"))
	return hex.EncodeToString(m.Sum(nil))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// LimitListener returns a listener that holds at most n accepted
// connections open at once; Accept waits for one to close beyond that (the
// kernel's backlog holds the new ones meanwhile).
func LimitListener(l net.Listener, n int) *Limited {
	return &Limited{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

// Limited is a listener that holds at most a fixed number of connections.
type Limited struct {
	net.Listener
	sem       chan struct{}
	open      atomic.Int64
	closeOnce sync.Once
	done      chan struct{}
}

// Accept waits for a free slot, then for a connection.
func (l *Limited) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	l.open.Add(1)
	return &limitConn{Conn: c, release: func() { l.open.Add(-1); <-l.sem }}, nil
}

// Close closes the listener; the connections it accepted stay open.
func (l *Limited) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// Open returns how many accepted connections are open.
func (l *Limited) Open() int { return int(l.open.Load()) }

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
