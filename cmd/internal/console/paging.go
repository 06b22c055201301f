package console

import (
	"net/url"
	"strconv"
	"strings"
)

// Paging is one page of a searched list, for the templates.
type Paging struct {
	// Query is the search (?q=), Page the 1-based page (?page=).
	Query       string
	Page, Pages int
	// Total is how many rows matched; From and To (1-based) the rows shown.
	Total, From, To int
	// Prev and Next are the neighbouring pages' URLs, empty at either end.
	Prev, Next string
}

// paginate picks the page of n matching rows asked for by ?page= (clamped),
// per rows a page, and returns it with the half-open range of rows to show.
func paginate(path string, q url.Values, n, per int) (Paging, int, int) {
	p := Paging{Query: strings.TrimSpace(q.Get("q")), Total: n, Pages: max(1, (n+per-1)/per)}
	p.Page, _ = strconv.Atoi(q.Get("page"))
	p.Page = min(max(p.Page, 1), p.Pages)
	start, end := (p.Page-1)*per, min(p.Page*per, n)
	if n > 0 {
		p.From, p.To = start+1, end
	}
	link := func(page int) string {
		v := url.Values{}
		if p.Query != "" {
			v.Set("q", p.Query)
		}
		v.Set("page", strconv.Itoa(page))
		return path + "?" + v.Encode()
	}
	if p.Page > 1 {
		p.Prev = link(p.Page - 1)
	}
	if p.Page < p.Pages {
		p.Next = link(p.Page + 1)
	}
	return p, start, end
}

// matches reports whether every word of the query appears in text,
// ignoring case; text is already lower-case.
func matches(query, text string) bool {
	for _, w := range strings.Fields(strings.ToLower(query)) {
		if !strings.Contains(text, w) {
			return false
		}
	}
	return true
}
