package filestore

import (
	"fmt"
	"os"
	"path/filepath"
)

// LoadPath decodes a file, or every YAML file of a directory tree, as one
// source, without a Store: for `vmesh validate` and `vmesh diff`. Errors name
// files relative to a directory root.
func LoadPath(path string) ([]*Object, []ConfigError, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", path, err)
	}
	if !info.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("load %s: %w", path, err)
		}
		objs, errs := DecodeFiles([]GitFile{{Path: path, Data: data}})
		return objs, errs, nil
	}
	rels, _, err := ScanTree(path)
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", path, err)
	}
	files := make([]GitFile, 0, len(rels))
	for _, rel := range rels {
		data, err := os.ReadFile(filepath.Join(path, rel))
		if err != nil {
			return nil, nil, fmt.Errorf("load %s: %w", path, err)
		}
		files = append(files, GitFile{Path: filepath.Join(path, rel), Data: data})
	}
	objs, errs := DecodeFiles(files)
	return objs, errs, nil
}
