package main

import "testing"

func TestDebVersion(t *testing.T) {
	for _, c := range []struct{ describe, want string }{
		{describe: "v1.2.0", want: "1.2.0"},
		{describe: "v1.2.0-3-gabc1234", want: "1.2.0+3.gabc1234"},
		{describe: "v1.2.0-3-gabc1234-dirty", want: "1.2.0+3.gabc1234.dirty"},
		{describe: "abc1234", want: "0~gitabc1234"},
		{describe: "4d8dd83-dirty", want: "0~git4d8dd83.dirty"},
		{describe: "", want: "0~dev"},
	} {
		if got := debVersion(c.describe); got != c.want {
			t.Errorf("debVersion(%q) = %q, want %q", c.describe, got, c.want)
		}
	}
}
