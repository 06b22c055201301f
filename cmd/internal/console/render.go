package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/vmesh/vmesh/internal/buildinfo"
)

// page is what every template gets: the page's own data and the change
// counter it was rendered at (the live script compares it with the event
// stream's).
type page struct {
	Title   string
	Nav     string
	Version int64
	// Build is the control plane's version, revision and Go version.
	Build string
	Data  any
	// Search is the search box of a searchable page, else nil.
	Search *SearchBox
	// RefreshEvery, in milliseconds, makes the page fetch itself on a
	// timer too (the graph with rates, which change with no event); 0:
	// never.
	RefreshEvery int64
}

// SearchBox is a searchable page's search form (outside the part the live
// script replaces, so typing is never interrupted).
type SearchBox struct {
	Action, Query, Placeholder string
}

// searchable is the data of a page with a search box.
type searchable interface{ searchBox() SearchBox }

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"age":   age,
		"when":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"lower": strings.ToLower,
		"add":   func(a, b int) int { return a + b },
		"clip": func(s string, n int) string {
			if r := []rune(s); len(r) > n {
				return string(r[:n-1]) + "…"
			}
			return s
		},
		"short": func(s string) string {
			if len(s) > 12 {
				return s[:12]
			}
			return s
		},
	}
	out := map[string]*template.Template{}
	// Each page is assets/templates/NAME.html with the layout.
	for _, name := range []string{"overview", "services", "proxies", "proxy", "changes", "graph"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/partials.html", "assets/templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// render executes a page into a buffer first, so a template error is a 500
// and not half a page.
func (c *Console) render(w http.ResponseWriter, code int, name string, data titled) {
	var buf bytes.Buffer
	p := page{Title: data.title(), Nav: name, Version: c.hub.version.Load(), Build: buildinfo.Get().String(), Data: data}
	if g, ok := data.(Graph); ok && g.Traffic != nil {
		p.RefreshEvery = max(g.Traffic.Window/4, time.Second).Milliseconds()
	}
	if s, ok := data.(searchable); ok {
		box := s.searchBox()
		p.Search = &box
	}
	if err := c.pages[name].Execute(&buf, p); err != nil {
		http.Error(w, fmt.Sprintf("console: rendering %s: %v", name, err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = buf.WriteTo(w)
}

// titled is every page's data: it names its page.
type titled interface{ title() string }

// age renders how long ago t was, "never" for the zero time.
func age(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t)
	switch {
	case d < time.Second:
		return "<1s ago"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds ago", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
}
