package filestore

import (
	"fmt"
	"github.com/vmesh/vmesh/store"
	"io"
	"os"
	"path/filepath"
)

// LoadPath decodes a file, or every YAML file of a directory tree, as one
// source, without a Store, within the default Limits: for `vmesh validate`
// and `vmesh diff`. Errors name files relative to a directory root. In a
// tree, entries that are not regular files (FIFOs, devices, symlink loops)
// are reported and skipped, as the directory source does; a file named
// explicitly is read whatever it is, up to the size limit.
func LoadPath(path string) ([]*store.Object, []store.ConfigError, error) {
	l, err := Load(path)
	return l.Objects, l.Errors, err
}

// Loaded is a set of files (or a git commit's) decoded as one source.
type Loaded struct {
	// Commit is the git commit read, for GitSource.Check.
	Commit  string
	Objects []*store.Object
	Errors  []store.ConfigError
	// Warnings are the files' own (warnings.go); the analysis across
	// objects is Analyze's.
	Warnings []store.ConfigError
}

// Load is LoadPath with the files' warnings.
func Load(path string) (Loaded, error) {
	lim := DefaultLimits()
	info, err := os.Stat(path)
	if err != nil {
		return Loaded{}, fmt.Errorf("load %s: %w", path, err)
	}
	if !info.IsDir() {
		data, err := readNamed(path, lim.MaxFileBytes)
		if err != nil {
			return Loaded{}, fmt.Errorf("load %s: %w", path, err)
		}
		return decodeFiles([]GitFile{{Path: path, Data: data}}, filepath.Dir(path), lim), nil
	}
	tree, err := ScanTree(path)
	if err != nil {
		return Loaded{}, fmt.Errorf("load %s: %w", path, err)
	}
	var problems []store.ConfigError
	for _, p := range tree.Problems {
		p.File = filepath.Join(path, p.File)
		problems = append(problems, p)
	}
	files := make([]GitFile, 0, len(tree.Files))
	for _, rel := range tree.Files {
		full := filepath.Join(path, rel)
		data, err := readRegular(full, lim.MaxFileBytes)
		if err != nil {
			problems = append(problems, store.ConfigError{File: full, Message: err.Error()})
			continue
		}
		files = append(files, GitFile{Path: full, Data: data})
	}
	l := decodeFiles(files, path, lim)
	l.Errors = append(problems, l.Errors...)
	return l, nil
}

// readNamed reads a file the user named (a pipe from a shell's <(...)
// included), refusing it past limit bytes.
func readNamed(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(int64(len(data)), limit)
	}
	return data, nil
}
