// Package atomicfile writes files so that readers see the old content or the
// new, never a mix: certificates, keys, bootstraps and bundles that other
// processes watch.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to path through a synced temporary file with the final
// mode in the same directory, renamed over path.
func Write(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
