package console_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/vmesh/vmesh/cmd/internal/console"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// BenchmarkProxiesPage10k renders one page of 10,000 proxies, plain and
// searched: the console's own cost, apart from reading the sync state.
func BenchmarkProxiesPage10k(b *testing.B) {
	all := fakeProxies(10000)
	c, err := console.New(console.Sources{Store: store.NewStore(), Syncz: func() []xds.SyncStatus { return all }})
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{"", "?q=shop+nack&page=2"} {
		b.Run("q="+q, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/ui/proxies"+q, nil)
			for b.Loop() {
				w := httptest.NewRecorder()
				c.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
			}
		})
	}
}
