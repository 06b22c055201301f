package filestore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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
	"github.com/vmesh/vmesh/internal/settle"
	"github.com/vmesh/vmesh/store"
)

// Settle settings for file sources (internal/settle): a burst of events is
// applied once the tree has been quiet for SettleQuiet (the gap between one
// writer's writes, so a file is read whole), or at most SettleMax after the
// first event of the burst. There is no other wait before the change is
// built: model.Feed pushes the first change after a quiet period at once.
const (
	SettleQuiet = settle.DefaultQuiet
	SettleMax   = settle.DefaultMax
)

// DirSource watches a directory tree of Istio YAML and keeps the Store's set
// for it current. A file that fails to decode keeps its last good objects and
// its errors stay reported until it is fixed or removed. Only regular files
// (or links to them) are read, each within Limits; anything else under the
// root (a FIFO, a device, a symlink loop) is reported with its path and
// skipped, and the rest of the tree stays live.
type DirSource struct {
	root       string
	src        store.Source
	store      *store.Store
	log        *slog.Logger
	ready      chan struct{}
	once       sync.Once
	files      *fileSet // by path relative to root
	limits     Limits
	allowEmpty bool
	// settleQuiet and settleMax bound a burst of events (SettleQuiet,
	// SettleMax unless WithSettle).
	settleQuiet, settleMax time.Duration
	// cache serves the first load, then is dropped.
	cache *DecodeCache
	// published is how many keys the Store has from this source: a folder
	// that defines nothing is kept from emptying it.
	published int
	// logged is a digest of each file's problems as last logged: a file is
	// logged once per change of its problems, not on every publish.
	logged map[string]uint64
}

// DirOption configures a DirSource.
type DirOption func(*DirSource)

// WithLimits bounds each file the source reads (zero fields: defaults).
func WithLimits(l Limits) DirOption { return func(d *DirSource) { d.limits = l.withDefaults() } }

// WithSettle sets how long a burst of events must stop before the tree is
// read (quiet), and how long after its first event it is read at the latest
// (max); zero takes SettleQuiet and SettleMax.
func WithSettle(quiet, max time.Duration) DirOption {
	return func(d *DirSource) { d.settleQuiet, d.settleMax = quiet, max }
}

// WithDecodeCache has the first load take what unchanged files decoded
// to from c, and record there what the others decode to; the caller saves
// c once the control plane serves (DecodeCache.Save).
func WithDecodeCache(c *DecodeCache) DirOption { return func(d *DirSource) { d.cache = c } }

// WithAllowEmpty lets the source withdraw every object when the folder comes
// to define none; by default that state is held and reported.
func WithAllowEmpty(allow bool) DirOption { return func(d *DirSource) { d.allowEmpty = allow } }

type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

// NewDirSource returns a source for the directory root. Its source name is
// "dir:<absolute root>".
func NewDirSource(root string, st *store.Store, logger *slog.Logger, opts ...DirOption) *DirSource {
	if logger == nil {
		logger = slog.Default()
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		abs = root
	}
	d := &DirSource{
		root:   abs,
		src:    store.Source{Name: "dir:" + abs, Class: store.ClassConfig},
		store:  st,
		log:    logger.With("source", "dir:"+abs),
		ready:  make(chan struct{}),
		limits: DefaultLimits(),
		logged: map[string]uint64{},
	}
	for _, o := range opts {
		o(d)
	}
	d.files = newFileSet(d.limits.MaxProblems)
	return d
}

// Source returns the Store source this DirSource writes.
func (d *DirSource) Source() store.Source { return d.src }

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
	if err := d.sync(ctx, w, watched); err != nil {
		return err
	}
	d.cache = nil // later loads are of changed files: decoded afresh
	burst := settle.New(d.settleQuiet, d.settleMax)
	defer burst.Stop()
	// The paths events named during the burst (filesOnly decides whether
	// they can be reloaded alone or the tree needs rescanning).
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
			pending[ev.Name] = true
			burst.Event(time.Now())
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			d.log.Warn("watch error; rescanning", "error", err)
			if err := d.sync(ctx, w, watched); err != nil {
				d.log.Error("rescan failed", "error", err)
			}
		case <-burst.C():
			burst.Done()
			var err error
			if rels, ok := d.filesOnly(pending); ok {
				err = d.syncFiles(ctx, rels)
			} else {
				err = d.sync(ctx, w, watched)
			}
			if err != nil {
				d.log.Error("rescan failed", "error", err)
			}
			pending = map[string]bool{}
		}
	}
}

// sync rescans the tree, updates the watches and hands the result to the
// Store. Entries that cannot be read are reported each under its path;
// only a root that cannot be listed fails the scan.
func (d *DirSource) sync(ctx context.Context, w *fsnotify.Watcher, watched map[string]bool) error {
	tree, err := d.scan()
	if err != nil {
		d.store.SetStatus(d.src, "", []store.ConfigError{{File: d.root, Message: err.Error()}})
		return fmt.Errorf("dir source %s: %w", d.root, err)
	}
	for dir := range tree.Dirs {
		if !watched[dir] {
			if err := w.Add(dir); err != nil {
				d.log.Warn("cannot watch directory", "dir", dir, "error", err)
				continue
			}
			watched[dir] = true
		}
	}
	for dir := range watched {
		if !tree.Dirs[dir] {
			_ = w.Remove(dir)
			delete(watched, dir)
		}
	}
	seen := make(map[string]bool, len(tree.Files)+len(tree.Problems))
	var stale []string
	for _, p := range tree.Files {
		seen[p] = true
		if d.changed(p) {
			stale = append(stale, p)
		}
	}
	for _, pr := range tree.Problems {
		seen[pr.File] = true
		d.files.set(pr.File, fileStamp{}, nil, []store.ConfigError{pr}, nil) // keeps the path's last good objects
	}
	d.loadAll(ctx, stale)
	for p := range d.files.files {
		if !seen[p] && !under(p, tree.Unlisted) {
			d.files.drop(p)
		}
	}
	return d.publish()
}

// under reports whether rel is one of dirs or inside one.
func under(rel string, dirs []string) bool {
	for _, dir := range dirs {
		if rel == dir || strings.HasPrefix(rel, dir+string(filepath.Separator)) {
			return true
		}
	}
	return false
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
		if yamlFile(rel) || d.files.files[rel] != nil { // a reported entry too
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
func (d *DirSource) syncFiles(ctx context.Context, rels []string) error {
	var stale []string
	for _, rel := range rels {
		info, err := os.Stat(filepath.Join(d.root, rel))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			d.files.drop(rel)
		case err != nil:
			d.files.set(rel, fileStamp{}, nil, []store.ConfigError{entryProblem(rel, err)}, nil)
		case !yamlFile(rel):
			d.files.drop(rel) // a reported entry that is fine now, and not config
		case !info.Mode().IsRegular():
			d.files.set(rel, fileStamp{}, nil, []store.ConfigError{entryProblem(rel, notRegular(info.Mode()))}, nil)
		case d.changed(rel):
			stale = append(stale, rel)
		}
	}
	d.loadAll(ctx, stale)
	return d.publish()
}

// publish hands the Store what the files changed since the last publish
// and every error: one edited file costs that file's keys. A folder that
// would leave the source with no object at all is held, unless allowEmpty.
func (d *DirSource) publish() error {
	if d.files.defined == 0 && d.published > 0 && !d.allowEmpty {
		errs := append(d.files.errors(), store.ConfigError{File: d.root, Message: fmt.Sprintf(
			"the folder defines no object: withdrawing all %d is held until a file defines one again (allowEmpty withdraws them)", d.published)})
		errs = append(errs, d.files.warnings()...)
		d.store.SetStatusHeld(d.src, "", errs, d.files.held())
		d.logProblems(errs) // once, under the root's name
		return nil
	}
	set, remove := d.files.changes()
	errs := append(d.files.errors(), d.files.warnings()...)
	// The objects and the files' problems in one snapshot: a reader never
	// sees an edited file's objects with the warnings of its previous content.
	if err := d.store.UpdateWithStatus(d.src, set, remove, store.StatusChange{Problems: errs, Held: d.files.held()}); err != nil {
		return err // cannot happen: each key is resolved once
	}
	d.published = len(d.files.defs)
	d.logProblems(errs)
	d.once.Do(func() { close(d.ready) })
	return nil
}

// logProblems logs one line for each file whose problems (errors and
// warnings) changed since they were last logged (with its bounded
// problems), and one when a file's problems are gone: an edit to one file
// never logs the others, and a warning is logged once, not per push.
func (d *DirSource) logProblems(errs []store.ConfigError) {
	byFile := map[string][]string{}
	warned := map[string][]string{}
	var order []string
	for _, e := range errs {
		if e.Severity == store.SeverityInfo {
			continue // infos are for vmesh analyze and /debug/config, not the log
		}
		if _, ok := byFile[e.File]; !ok {
			if _, ok := warned[e.File]; !ok {
				order = append(order, e.File)
			}
		}
		if e.Severity != store.SeverityError {
			warned[e.File] = append(warned[e.File], e.Error())
			continue
		}
		byFile[e.File] = append(byFile[e.File], e.Error())
	}
	for _, file := range order {
		h := fnv.New64a()
		for _, line := range slices.Concat(byFile[file], warned[file]) {
			h.Write([]byte(line))
			h.Write([]byte{0})
		}
		sum := h.Sum64()
		if prev, ok := d.logged[file]; ok && prev == sum {
			continue
		}
		d.logged[file] = sum
		switch {
		case len(byFile[file]) == 0:
			d.log.Warn("config warnings", "file", file, "warnings", warned[file])
		case len(warned[file]) > 0:
			d.log.Warn("config errors", "file", file, "errors", byFile[file], "warnings", warned[file])
		default:
			d.log.Warn("config errors", "file", file, "errors", byFile[file])
		}
	}
	for file := range d.logged {
		_, bad := byFile[file]
		if _, warn := warned[file]; !bad && !warn {
			delete(d.logged, file)
			d.log.Info("config errors cleared", "file", file)
		}
	}
}

// changed reports whether a file's stamp differs from the one last loaded.
func (d *DirSource) changed(rel string) bool {
	fs := d.files.files[rel]
	return fs == nil || fs.stamp == (fileStamp{}) || fs.stamp != stampOf(filepath.Join(d.root, rel))
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

// loadAll reads and decodes files in parallel, one worker per CPU, each
// within the limits. A file that fails keeps its last good objects.
func (d *DirSource) loadAll(ctx context.Context, rels []string) {
	type result struct {
		stamp fileStamp
		objs  []*store.Object
		errs  []store.ConfigError
		warns []store.ConfigError
	}
	results := make([]result, len(rels))
	parallel(len(rels), func(i int) {
		full := filepath.Join(d.root, rels[i])
		results[i].stamp = stampOf(full) // before reading: a later write changes it again
		data, err := readWithin(ctx, full, d.limits.MaxFileBytes, d.limits.ReadTimeout)
		if err != nil {
			if !errors.Is(err, errTooLarge) && !errors.Is(err, errNotRegular) {
				results[i].stamp = fileStamp{} // read again on the next event or rescan
			}
			results[i].errs = []store.ConfigError{{File: rels[i], Message: err.Error()}}
			return
		}
		dec := d.cache.Decode(rels[i], "", data, d.limits) // a nil cache decodes
		results[i].objs, results[i].errs, results[i].warns = dec.Objects, dec.Errors, dec.Warnings
	})
	for i, rel := range rels {
		r := results[i]
		for _, o := range r.objs {
			o.Origin.Source = d.src.Name
		}
		d.files.set(rel, r.stamp, r.objs, r.errs, r.warns)
	}
}

// scan lists the tree's YAML files and the directories to watch.
func (d *DirSource) scan() (Tree, error) {
	tree, err := ScanTree(d.root)
	if err != nil {
		return Tree{}, err
	}
	// A root that is itself a symlink can be swapped atomically: watch the
	// folder holding the link too.
	if li, err := os.Lstat(d.root); err == nil && li.Mode()&os.ModeSymlink != 0 {
		tree.Dirs[filepath.Dir(d.root)] = true
	}
	return tree, nil
}

// Tree is what ScanTree finds under a root.
type Tree struct {
	// Files are the regular .yaml/.yml files (or links to them), relative
	// to the root, sorted.
	Files []string
	// Dirs are the directories to watch, real and as reached.
	Dirs map[string]bool
	// Problems are the entries that cannot be read, each with its path
	// relative to the root: a YAML name that is not a regular file (FIFO,
	// device, socket), a link that cannot be followed (a loop), a folder
	// that cannot be listed or nests too deep.
	Problems []store.ConfigError
	// Unlisted are the folders (relative) that could not be listed: what
	// was known of their files stands until they can be read again.
	Unlisted []string
}

// maxDepth bounds folder nesting below the root.
const maxDepth = 32

// ScanTree walks a tree, following symbolic links, and returns its
// .yaml/.yml files (paths relative to root, sorted), the real directories
// it holds, and the entries it cannot read. Entries whose names start with
// "." are skipped, which also skips Kubernetes-style "..data" indirections
// while still reading the files that link through them. Only a root that
// cannot be listed is an error.
func ScanTree(root string) (Tree, error) {
	t := Tree{Dirs: map[string]bool{}}
	problem := func(rel string, err error) { t.Problems = append(t.Problems, entryProblem(rel, err)) }
	var walk func(real, rel string, depth int) error
	walk = func(real, rel string, depth int) error {
		if depth > maxDepth {
			problem(rel, fmt.Errorf("folders nest more than %d deep (a symlink loop?); not read", maxDepth))
			t.Unlisted = append(t.Unlisted, rel)
			return nil
		}
		resolved, err := filepath.EvalSymlinks(real)
		if err == nil && t.Dirs[resolved] {
			return nil
		}
		var entries []os.DirEntry
		if err == nil {
			entries, err = os.ReadDir(real)
		}
		if err != nil {
			if depth == 0 {
				return err
			}
			problem(rel, fmt.Errorf("folder not read: %w", err))
			t.Unlisted = append(t.Unlisted, rel)
			return nil
		}
		t.Dirs[resolved] = true
		t.Dirs[real] = true
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
				continue
			}
			full := filepath.Join(real, name)
			childRel := filepath.Join(rel, name)
			info, err := os.Stat(full) // follows symlinks
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue // dangling link or vanished
			case err != nil:
				problem(childRel, err) // a symlink loop, a permission
			case info.IsDir():
				if err := walk(full, childRel, depth+1); err != nil {
					return err
				}
			case !yamlFile(name):
			case !info.Mode().IsRegular():
				problem(childRel, notRegular(info.Mode()))
			default:
				t.Files = append(t.Files, childRel)
			}
		}
		return nil
	}
	if err := walk(root, "", 0); err != nil {
		return Tree{}, err
	}
	slices.Sort(t.Files)
	return t, nil
}

// entryProblem reports an entry of the tree that is not read.
func entryProblem(rel string, err error) store.ConfigError {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path is in File
	}
	msg := err.Error()
	if errors.Is(err, syscall.ELOOP) {
		msg = "cannot follow the symbolic link: " + msg + "; skipped"
	}
	return store.ConfigError{File: rel, Message: msg}
}

// parallel calls do(i) for i in [0, n), one worker per CPU.
func parallel(n int, do func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				do(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}
