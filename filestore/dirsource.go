package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Debounce settings for file sources: a burst of events is applied once
// the tree has been quiet for DebounceQuiet, or at most DebounceMax after the
// first event of the burst.
const (
	DebounceQuiet = 100 * time.Millisecond
	DebounceMax   = time.Second
)

// DirSource watches a directory tree of Istio YAML and keeps the Store's set
// for it current. A file that fails to decode keeps its last good objects and
// its errors stay reported until it is fixed or removed.
type DirSource struct {
	root  string
	src   Source
	store *Store
	log   *slog.Logger
	ready chan struct{}
	once  sync.Once
	files *fileSet // by path relative to root
}

type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

// NewDirSource returns a source for the directory root. Its source name is
// "dir:<absolute root>".
func NewDirSource(root string, store *Store, logger *slog.Logger) *DirSource {
	if logger == nil {
		logger = slog.Default()
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		abs = root
	}
	return &DirSource{
		root:  abs,
		src:   Source{Name: "dir:" + abs, Class: ClassConfig},
		store: store,
		log:   logger.With("source", "dir:"+abs),
		ready: make(chan struct{}),
		files: newFileSet(),
	}
}

// Source returns the Store source this DirSource writes.
func (d *DirSource) Source() Source { return d.src }

// Ready is closed once the first load has reached the Store.
func (d *DirSource) Ready() <-chan struct{} { return d.ready }

// Run loads the tree, then watches it until ctx is done.
func (d *DirSource) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("dir source %s: %w", d.root, err)
	}
	defer w.Close()
	watched := map[string]bool{}
	if err := d.sync(w, watched); err != nil {
		return err
	}
	var timer *time.Timer
	var timerC <-chan time.Time
	var burstStart time.Time
	// The paths events named during the burst; nil after an event that
	// needs the whole tree rescanned.
	pending := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if pending != nil {
				pending[ev.Name] = true
			}
			now := time.Now()
			if timerC == nil {
				burstStart = now
			}
			wait := DebounceQuiet
			if rest := DebounceMax - now.Sub(burstStart); rest < wait {
				wait = max(rest, 0)
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			timerC = timer.C
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			d.log.Warn("watch error; rescanning", "error", err)
			if err := d.sync(w, watched); err != nil {
				d.log.Error("rescan failed", "error", err)
			}
		case <-timerC:
			timerC = nil
			var err error
			if rels, ok := d.filesOnly(pending); ok {
				err = d.syncFiles(rels)
			} else {
				err = d.sync(w, watched)
			}
			if err != nil {
				d.log.Error("rescan failed", "error", err)
			}
			pending = map[string]bool{}
		}
	}
}

// sync rescans the tree, updates the watches and hands the result to the Store.
func (d *DirSource) sync(w *fsnotify.Watcher, watched map[string]bool) error {
	paths, dirs, err := d.scan()
	if err != nil {
		d.store.SetStatus(d.src, "", []ConfigError{{File: d.root, Message: err.Error()}})
		return fmt.Errorf("dir source %s: %w", d.root, err)
	}
	for dir := range dirs {
		if !watched[dir] {
			if err := w.Add(dir); err != nil {
				d.log.Warn("cannot watch directory", "dir", dir, "error", err)
				continue
			}
			watched[dir] = true
		}
	}
	for dir := range watched {
		if !dirs[dir] {
			_ = w.Remove(dir)
			delete(watched, dir)
		}
	}
	seen := make(map[string]bool, len(paths))
	var stale []string
	for _, p := range paths {
		seen[p] = true
		if d.changed(p) {
			stale = append(stale, p)
		}
	}
	d.loadAll(stale)
	for p := range d.files.files {
		if !seen[p] {
			d.files.drop(p)
		}
	}
	return d.publish()
}

// filesOnly maps the paths a burst of events named to the YAML files they
// are, relative to the root. It reports false when the burst needs the whole
// tree rescanned: an event outside the root (a symlinked folder), on a
// directory or symlink (created, removed, renamed or swapped), or none
// recorded (a watch error).
func (d *DirSource) filesOnly(paths map[string]bool) ([]string, bool) {
	if len(paths) == 0 {
		return nil, false
	}
	var rels []string
	for p := range paths {
		rel, err := filepath.Rel(d.root, p)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
			return nil, false
		}
		info, err := os.Lstat(p)
		switch {
		case err == nil && (info.IsDir() || info.Mode()&os.ModeSymlink != 0):
			return nil, false
		case err != nil && d.holdsFilesUnder(rel):
			return nil, false // a directory went away
		}
		if yamlFile(rel) {
			rels = append(rels, rel)
		}
	}
	return rels, true
}

func (d *DirSource) holdsFilesUnder(rel string) bool {
	prefix := rel + string(filepath.Separator)
	for f := range d.files.files {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
}

// yamlFile reports whether a relative path is a file the source reads: a
// .yaml/.yml name with no hidden component and no editor backup suffix.
func yamlFile(rel string) bool {
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if strings.HasPrefix(part, ".") {
			return false
		}
	}
	return !strings.HasSuffix(rel, "~") && (strings.HasSuffix(rel, ".yaml") || strings.HasSuffix(rel, ".yml"))
}

// syncFiles reloads just the named files (created, written, renamed over or
// removed) and hands the result to the Store: a one-file edit costs one
// file, not a walk of the tree.
func (d *DirSource) syncFiles(rels []string) error {
	var stale []string
	for _, rel := range rels {
		if _, err := os.Stat(filepath.Join(d.root, rel)); err != nil {
			d.files.drop(rel)
			continue
		}
		if d.changed(rel) {
			stale = append(stale, rel)
		}
	}
	d.loadAll(stale)
	return d.publish()
}

// publish hands the Store what the files changed since the last publish
// and every error: one edited file costs that file's keys.
func (d *DirSource) publish() error {
	set, remove := d.files.changes()
	if err := d.store.Update(d.src, set, remove); err != nil {
		return err // cannot happen: each key is resolved once
	}
	errs := d.files.errors()
	d.store.SetStatus(d.src, "", errs)
	for _, e := range errs {
		d.log.Warn("config error", "error", e.Error())
	}
	d.once.Do(func() { close(d.ready) })
	return nil
}

// changed reports whether a file's stamp differs from the one last loaded.
func (d *DirSource) changed(rel string) bool {
	fs := d.files.files[rel]
	return fs == nil || fs.stamp != stampOf(filepath.Join(d.root, rel))
}

func stampOf(path string) fileStamp {
	info, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	stamp := fileStamp{size: info.Size(), mtime: info.ModTime()}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		stamp.ino = st.Ino
	}
	return stamp
}

// loadAll reads and decodes files in parallel, one worker per CPU. A file
// that fails keeps its last good objects.
func (d *DirSource) loadAll(rels []string) {
	type result struct {
		stamp fileStamp
		objs  []*Object
		errs  []ConfigError
	}
	results := make([]result, len(rels))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(rels)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				full := filepath.Join(d.root, rels[i])
				results[i].stamp = stampOf(full) // before reading: a later write changes it again
				data, err := os.ReadFile(full)
				if err != nil {
					results[i].errs = []ConfigError{{File: rels[i], Message: err.Error()}}
					continue
				}
				results[i].objs, results[i].errs = Decode(rels[i], data)
			}
		}()
	}
	for i := range rels {
		work <- i
	}
	close(work)
	wg.Wait()
	for i, rel := range rels {
		r := results[i]
		for _, o := range r.objs {
			o.Origin.Source = d.src.Name
		}
		d.files.set(rel, r.stamp, r.objs, r.errs)
	}
}

// scan lists the tree's YAML files and the directories to watch.
func (d *DirSource) scan() ([]string, map[string]bool, error) {
	files, dirs, err := ScanTree(d.root)
	if err != nil {
		return nil, nil, err
	}
	// A root that is itself a symlink can be swapped atomically: watch the
	// folder holding the link too.
	if li, err := os.Lstat(d.root); err == nil && li.Mode()&os.ModeSymlink != 0 {
		dirs[filepath.Dir(d.root)] = true
	}
	return files, dirs, nil
}

// ScanTree walks a tree, following symbolic links, and returns its
// .yaml/.yml files (paths relative to root, sorted) and the real directories
// it holds. Entries whose names start with "." are skipped, which also skips
// Kubernetes-style "..data" indirections while still reading the files that
// link through them.
func ScanTree(root string) ([]string, map[string]bool, error) {
	var files []string
	dirs := map[string]bool{}
	var walk func(real, rel string, depth int) error
	walk = func(real, rel string, depth int) error {
		if depth > 32 {
			return fmt.Errorf("%s: directory nesting too deep (symlink loop?)", rel)
		}
		resolved, err := filepath.EvalSymlinks(real)
		if err != nil {
			return err
		}
		if dirs[resolved] {
			return nil
		}
		dirs[resolved] = true
		dirs[real] = true
		entries, err := os.ReadDir(real)
		if err != nil {
			return err
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
				continue
			}
			full := filepath.Join(real, name)
			childRel := filepath.Join(rel, name)
			info, err := os.Stat(full) // follows symlinks
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue // dangling link or vanished
				}
				return err
			}
			switch {
			case info.IsDir():
				if err := walk(full, childRel, depth+1); err != nil {
					return err
				}
			case yamlFile(name):
				files = append(files, childRel)
			}
		}
		return nil
	}
	if err := walk(root, "", 0); err != nil {
		return nil, nil, err
	}
	slices.Sort(files)
	return files, dirs, nil
}
