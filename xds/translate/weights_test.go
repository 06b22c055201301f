package translate_test

import (
	"testing"

	"github.com/vmesh/vmesh/xds/translate"
)

func TestDestinationWeight(t *testing.T) {
	tests := []struct {
		name   string
		weight int32
		n      int
		want   uint32
		wantOK bool
	}{
		{name: "single destination without weight gets 100", weight: 0, n: 1, want: 100, wantOK: true},
		{name: "single destination with a weight gets 100", weight: 30, n: 1, want: 100, wantOK: true},
		{name: "single destination with a negative weight gets 100", weight: -5, n: 1, want: 100, wantOK: true},
		{name: "weight kept among several", weight: 30, n: 2, want: 30, wantOK: true},
		{name: "zero weight among several is left out", weight: 0, n: 3, want: 0, wantOK: false},
		{name: "negative weight among several is left out", weight: -1, n: 2, want: 0, wantOK: false},
		{name: "weight above 100 kept as is", weight: 250, n: 2, want: 250, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := translate.DestinationWeight(tt.weight, tt.n)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("DestinationWeight(%d, %d) = %d, %v; want %d, %v", tt.weight, tt.n, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
