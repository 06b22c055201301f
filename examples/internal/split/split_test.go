package split

import "testing"

func TestRender(t *testing.T) {
	got := Render(map[string]int{"v2": 20, "v1": 80}, 3)
	want := "  v1  80% ################      v2  20% ####                  (100 calls, 3 failed)"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got := Render(map[string]int{}, 2); got != "  no successful calls (2 failed)" {
		t.Fatalf("empty: %q", got)
	}
}
