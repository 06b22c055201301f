package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vmesh/vmesh/internal/atomicfile"
)

func TestWriteReplacesWithModeAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	info, _ := os.Stat(p)
	if string(data) != "new" || info.Mode().Perm() != 0o600 {
		t.Fatalf("content %q mode %v", data, info.Mode())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	if err := atomicfile.Write(filepath.Join(dir, "missing", "x"), nil, 0o644); err == nil {
		t.Fatal("write into a missing folder succeeded")
	}
}
