package filestore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/store"
)

// fileSet is the files of one source and what they define: a key defined
// by several files is the first one's in path order, the others are
// reported. It remembers which files changed since the last changes call,
// so the source hands the Store only what those files define or defined:
// a one-file edit costs that file, not the source.
type fileSet struct {
	files map[string]*fileState // by path relative to the source's root
	// defs lists, per key, the files whose good objects define it, in path
	// order: the first one's object is the source's.
	defs map[store.Key][]string
	// dups counts the keys defined by more than one file, troubled the
	// files with errors or a key repeated within them, defined the keys
	// of every file's good objects (a key in two files counted twice: it
	// is 0 when, and only when, no file defines anything).
	dups, troubled, defined int
	// warned counts the files with warnings.
	warned int
	// maxProblems bounds the problems reported per file.
	maxProblems int
	// dirty holds, for each file whose good objects changed since the last
	// changes call, the good objects it had then.
	dirty map[string][]*store.Object
}

// fileState is one file: its last good objects and its current errors.
type fileState struct {
	stamp fileStamp
	good  []*store.Object             // last good objects
	byKey map[store.Key]*store.Object // good by key, the first of a key the file repeats
	errs  []store.ConfigError
	warns []store.ConfigError // the warnings of good
}

func newFileSet(maxProblems int) *fileSet {
	return &fileSet{files: map[string]*fileState{}, defs: map[store.Key][]string{}, dirty: map[string][]*store.Object{}, maxProblems: maxProblems}
}

// set records a file's newly read version: its errors, and its objects
// and warnings when there are none (a file with errors keeps its last good
// objects and their warnings).
func (f *fileSet) set(rel string, stamp fileStamp, objs []*store.Object, errs, warns []store.ConfigError) {
	fs := f.files[rel]
	if fs == nil {
		fs = &fileState{}
		f.files[rel] = fs
	}
	f.troubled -= fs.troubled()
	fs.stamp, fs.errs = stamp, errs
	if len(errs) == 0 {
		if _, ok := f.dirty[rel]; !ok {
			f.dirty[rel] = fs.good
		}
		f.defined -= len(fs.byKey)
		fs.good = objs
		fs.byKey = make(map[store.Key]*store.Object, len(objs))
		for _, o := range objs {
			if _, dup := fs.byKey[o.Key]; !dup {
				fs.byKey[o.Key] = o
			}
		}
		f.defined += len(fs.byKey)
		if len(fs.warns) > 0 {
			f.warned--
		}
		fs.warns = warns
		if len(fs.warns) > 0 {
			f.warned++
		}
	}
	f.troubled += fs.troubled()
}

// drop forgets a file that is gone.
func (f *fileSet) drop(rel string) {
	fs := f.files[rel]
	if fs == nil {
		return
	}
	if _, ok := f.dirty[rel]; !ok {
		f.dirty[rel] = fs.good
	}
	f.troubled -= fs.troubled()
	f.defined -= len(fs.byKey)
	if len(fs.warns) > 0 {
		f.warned--
	}
	delete(f.files, rel)
}

// warnings returns every file's warnings in path order; nothing, at no
// cost, when no file has any.
func (f *fileSet) warnings() []store.ConfigError {
	if f.warned == 0 {
		return nil
	}
	rels := make([]string, 0, f.warned)
	for p, fs := range f.files {
		if len(fs.warns) > 0 {
			rels = append(rels, p)
		}
	}
	slices.Sort(rels)
	var out []store.ConfigError
	for _, rel := range rels {
		out = append(out, f.files[rel].warns...)
	}
	return out
}

// troubled is 1 for a file with errors or a key it repeats, else 0.
func (fs *fileState) troubled() int {
	if len(fs.errs) > 0 || len(fs.byKey) != len(fs.good) {
		return 1
	}
	return 0
}

// changes returns what the files changed since the last call, for
// Store.Update: the current object of every key the changed files define
// or defined, and the keys no file defines any more.
func (f *fileSet) changes() (set []*store.Object, remove []store.Key) {
	touched := map[store.Key]struct{}{}
	for rel, before := range f.dirty {
		for _, o := range before {
			f.undefine(o.Key, rel)
			touched[o.Key] = struct{}{}
		}
		if fs := f.files[rel]; fs != nil {
			for k := range fs.byKey {
				f.define(k, rel)
				touched[k] = struct{}{}
			}
		}
	}
	clear(f.dirty)
	for k := range touched {
		if files := f.defs[k]; len(files) > 0 {
			set = append(set, f.files[files[0]].byKey[k])
		} else {
			remove = append(remove, k)
		}
	}
	return set, remove
}

// define adds rel to the files defining k, in path order.
func (f *fileSet) define(k store.Key, rel string) {
	files := f.defs[k]
	i, found := slices.BinarySearch(files, rel)
	if found {
		return
	}
	f.defs[k] = slices.Insert(files, i, rel)
	if len(files) == 1 {
		f.dups++
	}
}

// undefine removes rel from the files defining k.
func (f *fileSet) undefine(k store.Key, rel string) {
	files := f.defs[k]
	i, found := slices.BinarySearch(files, rel)
	if !found {
		return
	}
	if len(files) == 2 {
		f.dups--
	}
	if len(files) == 1 {
		delete(f.defs, k)
		return
	}
	f.defs[k] = slices.Delete(files, i, i+1)
}

// errors returns every file's errors in path order, with the keys defined
// twice; nothing, at no cost, for a set without either. Call it after
// changes.
func (f *fileSet) errors() []store.ConfigError {
	if f.dups == 0 && f.troubled == 0 {
		return nil
	}
	rels := make([]string, 0, len(f.files))
	for p := range f.files {
		rels = append(rels, p)
	}
	slices.Sort(rels)
	var errs []store.ConfigError
	var dd dedup
	for _, rel := range rels {
		fs := f.files[rel]
		errs = append(errs, fs.errs...)
		errs = dd.add(fs.good, errs, f.maxProblems)
	}
	return errs
}

// held says which files with errors keep their last good objects (the
// source's SourceStatus.Held), or "": the files' errors are counted, this
// is not one more.
func (f *fileSet) held() string {
	if f.troubled == 0 {
		return ""
	}
	var kept []string
	for rel, fs := range f.files {
		if len(fs.errs) > 0 && fs.good != nil {
			kept = append(kept, rel)
		}
	}
	if len(kept) == 0 {
		return ""
	}
	slices.Sort(kept)
	return "keeping the last good version of " + strings.Join(kept, ", ") + " until fixed"
}

// dedup collects one source's objects in file order, keeping the first
// definition of each key and reporting the others with both places.
type dedup struct {
	objs  []*store.Object
	first map[store.Key]*store.Object
}

// add adds one file's objects, appending to errs at most max of the
// duplicates it finds (and a line counting the rest).
func (d *dedup) add(objs []*store.Object, errs []store.ConfigError, max int) []store.ConfigError {
	if d.first == nil {
		d.first = map[store.Key]*store.Object{}
	}
	start := len(errs)
	for _, o := range objs {
		if prev, dup := d.first[o.Key]; dup {
			errs = append(errs, store.ConfigError{File: o.Origin.File, Line: o.Origin.Line, Object: clip(o.Key.String(), maxField),
				Message: fmt.Sprintf("defined twice in this source; keeping %s:%d", prev.Origin.File, prev.Origin.Line)})
			continue
		}
		d.first[o.Key] = o
		d.objs = append(d.objs, o)
	}
	if len(errs)-start > max && len(objs) > 0 {
		return append(errs[:start], capProblems(objs[0].Origin.File, errs[start:], max)...)
	}
	return errs
}
