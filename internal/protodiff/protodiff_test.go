package protodiff_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/internal/protodiff"
)

func TestLines(t *testing.T) {
	a, _ := structpb.NewStruct(map[string]any{"a": 1, "b": "x", "c": true})
	b, _ := structpb.NewStruct(map[string]any{"a": 2, "b": "x", "d": "new"})
	if got, want := protodiff.Fields(a, b), "a: 1 -> 2\nc: true -> (none)\nd: (none) -> \"new\"\n"; got != want {
		t.Errorf("Fields:\n%s\nwant:\n%s", got, want)
	}
	if got, want := protodiff.Lines(a, b, 1), "a: 1 -> 2\n… and 2 more field(s)\n"; got != want {
		t.Errorf("Lines(1):\n%s\nwant:\n%s", got, want)
	}
}
