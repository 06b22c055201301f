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
	files map[string]*fileState // by path relative to root
	// defs lists, per key, the files whose good objects define it, in path
	// order: the first one's object is the source's.
	defs map[Key][]string
	// dups counts the keys defined by more than one file, troubled the
	// files with errors or a key repeated within them.
	dups, troubled int
	// dirty holds, for each file whose good objects changed since the last
	// publish, the good objects it had then.
	dirty map[string][]*Object
}

type fileState struct {
	stamp fileStamp
	good  []*Object       // last good objects
	byKey map[Key]*Object // good by key, the first of a key the file repeats
	errs  []ConfigError
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
		files: map[string]*fileState{},
		defs:  map[Key][]string{},
		dirty: map[string][]*Object{},
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
	for p := range d.files {
		if !seen[p] {
			d.drop(p)
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
	for f := range d.files {
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
			d.drop(rel)
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
// (the keys their good objects define or defined, resolved to the first
// defining file in path order) and every error. It costs what changed:
// one edited file is one file's keys.
func (d *DirSource) publish() error {
	touched := map[Key]struct{}{}
	for rel, before := range d.dirty {
		for _, o := range before {
			d.undefine(o.Key, rel)
			touched[o.Key] = struct{}{}
		}
		if fs := d.files[rel]; fs != nil {
			for k := range fs.byKey {
				d.define(k, rel)
				touched[k] = struct{}{}
			}
		}
	}
	clear(d.dirty)
	var set []*Object
	var remove []Key
	for k := range touched {
		if files := d.defs[k]; len(files) > 0 {
			set = append(set, d.files[files[0]].byKey[k])
		} else {
			remove = append(remove, k)
		}
	}
	if err := d.store.Update(d.src, set, remove); err != nil {
		return err // cannot happen: each key is resolved once
	}
	errs := d.errors()
	d.store.SetStatus(d.src, "", errs)
	for _, e := range errs {
		d.log.Warn("config error", "error", e.Error())
	}
	d.once.Do(func() { close(d.ready) })
	return nil
}

// setGood records a file's new good objects.
func (d *DirSource) setGood(rel string, fs *fileState, objs []*Object) {
	if _, ok := d.dirty[rel]; !ok {
		d.dirty[rel] = fs.good
	}
	fs.good = objs
	fs.byKey = make(map[Key]*Object, len(objs))
	for _, o := range objs {
		if _, dup := fs.byKey[o.Key]; !dup {
			fs.byKey[o.Key] = o
		}
	}
}

// drop forgets a file that is gone.
func (d *DirSource) drop(rel string) {
	fs := d.files[rel]
	if fs == nil {
		return
	}
	if _, ok := d.dirty[rel]; !ok {
		d.dirty[rel] = fs.good
	}
	d.troubled -= fs.troubled()
	delete(d.files, rel)
}

// troubled is 1 for a file with errors or a key it repeats, else 0.
func (fs *fileState) troubled() int {
	if len(fs.errs) > 0 || len(fs.byKey) != len(fs.good) {
		return 1
	}
	return 0
}

// define adds rel to the files defining k, in path order.
func (d *DirSource) define(k Key, rel string) {
	files := d.defs[k]
	i, found := slices.BinarySearch(files, rel)
	if found {
		return
	}
	d.defs[k] = slices.Insert(files, i, rel)
	if len(files) == 1 {
		d.dups++
	}
}

// undefine removes rel from the files defining k.
func (d *DirSource) undefine(k Key, rel string) {
	files := d.defs[k]
	i, found := slices.BinarySearch(files, rel)
	if !found {
		return
	}
	if len(files) == 2 {
		d.dups--
	}
	if len(files) == 1 {
		delete(d.defs, k)
		return
	}
	d.defs[k] = slices.Delete(files, i, i+1)
}

// errors returns every file's errors in path order, with the keys defined
// twice; nothing, at no cost, for a source without either.
func (d *DirSource) errors() []ConfigError {
	if d.dups == 0 && d.troubled == 0 {
		return nil
	}
	_, errs := d.collect()
	return errs
}

// changed reports whether a file's stamp differs from the one last loaded.
func (d *DirSource) changed(rel string) bool {
	fs := d.files[rel]
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
		fs := d.files[rel]
		if fs == nil {
			fs = &fileState{}
			d.files[rel] = fs
		}
		r := results[i]
		d.troubled -= fs.troubled()
		fs.stamp, fs.errs = r.stamp, r.errs
		for _, o := range r.objs {
			o.Origin.Source = d.src.Name
		}
		if len(r.errs) == 0 {
			d.setGood(rel, fs, r.objs)
		}
		d.troubled += fs.troubled()
	}
}

// collect merges every file's last good objects; a key defined in two files
// is kept from the first file in path order and reported on the second.
// publish uses it for the errors only.
func (d *DirSource) collect() ([]*Object, []ConfigError) {
	rels := make([]string, 0, len(d.files))
	for p := range d.files {
		rels = append(rels, p)
	}
	slices.Sort(rels)
	var errs []ConfigError
	var dd dedup
	for _, rel := range rels {
		fs := d.files[rel]
		errs = append(errs, fs.errs...)
		if len(fs.errs) > 0 && fs.good != nil {
			errs = append(errs, ConfigError{File: rel, Message: "keeping the last good version of this file until it is fixed"})
		}
		errs = dd.add(fs.good, errs)
	}
	return dd.objs, errs
}

// dedup collects one source's objects in file order, keeping the first
// definition of each key and reporting the others with both places.
type dedup struct {
	objs  []*Object
	first map[Key]*Object
}

func (d *dedup) add(objs []*Object, errs []ConfigError) []ConfigError {
	if d.first == nil {
		d.first = map[Key]*Object{}
	}
	for _, o := range objs {
		if prev, dup := d.first[o.Key]; dup {
			errs = append(errs, ConfigError{File: o.Origin.File, Line: o.Origin.Line, Object: o.Key.String(),
				Message: fmt.Sprintf("defined twice in this source; keeping %s:%d", prev.Origin.File, prev.Origin.Line)})
			continue
		}
		d.first[o.Key] = o
		d.objs = append(d.objs, o)
	}
	return errs
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
