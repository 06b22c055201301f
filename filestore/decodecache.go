package filestore

import (
	"bufio"
	"crypto/sha256"
	"encoding/gob"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/vmesh/vmesh/store"
)

// DecodeCache keeps what files decoded to across restarts, so a control
// plane restarted on an unchanged tree does not parse its YAML again: at
// 1,000 services × 10 endpoints parsing is over half of start's CPU
// (BENCHMARKS.md). An entry is keyed by the SHA-256 of the file's name,
// content and limits and of the decoder's build (its VCS revision, or the
// executable's size and time when the build is not a clean commit), so a
// changed file, new limits or a new vmesh all miss and decode afresh. The
// cache lives in the data directory, beside the CA's key: whoever can
// write it already holds the mesh's identity. An unreadable or foreign
// cache is ignored (decoding is the fallback), never an error.
//
// It serves one initial load: Save writes back exactly the entries that
// load used, so files since deleted or changed drop out.
type DecodeCache struct {
	path    string
	version string

	mu      sync.Mutex
	entries map[[32]byte]cachedDecode // read from disk
	used    map[[32]byte]cachedDecode // served since Open
	fresh   map[[32]byte]Decoded      // decoded since Open, encoded by Save
	hits    int
	misses  int
}

// decodeCacheFormat names the on-disk layout; a change to cachedDecode or
// to what decoding yields bumps it.
const decodeCacheFormat = "vmesh-decode-cache/1"

// cachedDecode is one file's Decoded, with each object's spec in protobuf
// wire form.
type cachedDecode struct {
	Objects  []cachedObject
	Errors   []store.ConfigError
	Warnings []store.ConfigError
}

type cachedObject struct {
	Key          store.Key
	APIVersion   string
	Labels       map[string]string
	Annotations  map[string]string
	SpecType     string
	Spec         []byte
	Healthy      *bool
	HealthReason string
	Origin       store.Origin
	Lines        map[string]int
}

type decodeCacheFile struct {
	Format  string
	Version string
	Entries map[[32]byte]cachedDecode
}

// OpenDecodeCache reads the cache at path (missing, unreadable or from
// another build: an empty cache).
func OpenDecodeCache(path string) *DecodeCache {
	c := &DecodeCache{path: path, version: buildIdentity(), entries: map[[32]byte]cachedDecode{}, used: map[[32]byte]cachedDecode{}, fresh: map[[32]byte]Decoded{}}
	f, err := os.Open(path)
	if err != nil {
		return c
	}
	defer f.Close()
	var on decodeCacheFile
	if err := gob.NewDecoder(bufio.NewReaderSize(f, 1<<20)).Decode(&on); err != nil {
		return c
	}
	if on.Format == decodeCacheFormat && on.Version == c.version && on.Entries != nil {
		c.entries = on.Entries
	}
	return c
}

// buildIdentity names the decoder's build: a clean VCS revision, else the
// running executable's size and modification time, else nothing (no
// entry is ever reused).
func buildIdentity() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" && modified == "false" {
			return "rev:" + rev
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	info, err := os.Stat(exe)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("exe:%s:%d:%d", exe, info.Size(), info.ModTime().UnixNano())
}

// Decode is DecodeSourceFile(rel, root, data, lim) through the cache.
func (c *DecodeCache) Decode(rel, root string, data []byte, lim Limits) Decoded {
	if c == nil || c.version == "" {
		return DecodeSourceFile(rel, root, data, lim)
	}
	key := c.key(rel, root, data, lim)
	c.mu.Lock()
	e, ok := c.entries[key]
	if ok {
		c.used[key] = e
		c.hits++
	}
	c.mu.Unlock()
	if ok {
		if dec, err := e.decoded(); err == nil {
			return dec
		}
	}
	dec := DecodeSourceFile(rel, root, data, lim)
	c.mu.Lock()
	if !ok {
		c.misses++
	}
	delete(c.used, key)
	c.fresh[key] = detached(dec) // encoded by Save, off the start's path
	c.mu.Unlock()
	return dec
}

// detached copies what Save reads of dec, so that the caller may go on
// changing its objects (their origin's source and commit); specs are
// shared: objects handed to the Store are never changed.
func detached(dec Decoded) Decoded {
	out := Decoded{Errors: slices.Clone(dec.Errors), Warnings: slices.Clone(dec.Warnings)}
	for _, o := range dec.Objects {
		c := *o
		c.Labels, c.Annotations = maps.Clone(o.Labels), maps.Clone(o.Annotations)
		c.SetFieldLines(maps.Clone(o.FieldLines()))
		out.Objects = append(out.Objects, &c)
	}
	return out
}

// Counts returns how many lookups were served from the cache and how many
// decoded the file.
func (c *DecodeCache) Counts() (hits, misses int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

// Save writes the entries used since Open (atomically: a crash leaves the
// old cache or the new one) and drops the ones read but not used.
func (c *DecodeCache) Save() error {
	if c == nil || c.version == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	entries := c.used
	for key, dec := range c.fresh {
		if e, err := cacheable(dec); err == nil {
			entries[key] = e
		}
	}
	on := decodeCacheFile{Format: decodeCacheFormat, Version: c.version, Entries: entries}
	c.entries, c.used, c.fresh = entries, map[[32]byte]cachedDecode{}, map[[32]byte]Decoded{}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return fmt.Errorf("decode cache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".decode-cache-*")
	if err != nil {
		return fmt.Errorf("decode cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriterSize(tmp, 1<<20)
	err = gob.NewEncoder(w).Encode(&on)
	if err == nil {
		err = w.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), c.path)
	}
	if err != nil {
		return fmt.Errorf("decode cache %s: %w", c.path, err)
	}
	return nil
}

func (c *DecodeCache) key(rel, root string, data []byte, lim Limits) [32]byte {
	h := sha256.New()
	lim = lim.withDefaults()
	fmt.Fprintf(h, "%s\x00%s\x00%q\x00%q\x00%d\x00%d\x00%d\x00%d\x00", decodeCacheFormat, c.version, rel, root,
		lim.MaxFileBytes, lim.MaxDocuments, lim.MaxProblems, len(data))
	h.Write(data)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func cacheable(dec Decoded) (cachedDecode, error) {
	e := cachedDecode{Errors: slices.Clone(dec.Errors), Warnings: slices.Clone(dec.Warnings)}
	for _, o := range dec.Objects {
		co := cachedObject{Key: o.Key, APIVersion: o.APIVersion, Labels: maps.Clone(o.Labels), Annotations: maps.Clone(o.Annotations),
			HealthReason: o.HealthReason, Origin: o.Origin, Lines: maps.Clone(o.FieldLines())}
		if o.Healthy != nil {
			h := *o.Healthy
			co.Healthy = &h
		}
		if o.Spec != nil {
			b, err := proto.Marshal(o.Spec)
			if err != nil {
				return cachedDecode{}, err
			}
			co.SpecType, co.Spec = string(o.Spec.ProtoReflect().Descriptor().FullName()), b
		}
		e.Objects = append(e.Objects, co)
	}
	return e, nil
}

var errUnknownSpec = errors.New("decode cache: unknown spec type")

// decoded rebuilds the Decoded; every call returns new objects sharing
// nothing with the entry.
func (e cachedDecode) decoded() (Decoded, error) {
	dec := Decoded{Errors: slices.Clone(e.Errors), Warnings: slices.Clone(e.Warnings)}
	for _, co := range e.Objects {
		o := &store.Object{Key: co.Key, APIVersion: co.APIVersion, Labels: maps.Clone(co.Labels), Annotations: maps.Clone(co.Annotations),
			HealthReason: co.HealthReason, Origin: co.Origin}
		if co.Healthy != nil {
			h := *co.Healthy
			o.Healthy = &h
		}
		if co.SpecType != "" {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(co.SpecType))
			if err != nil {
				return Decoded{}, fmt.Errorf("%w %s", errUnknownSpec, co.SpecType)
			}
			m := mt.New().Interface()
			if err := proto.Unmarshal(co.Spec, m); err != nil {
				return Decoded{}, fmt.Errorf("decode cache: %w", err)
			}
			o.Spec = m
		}
		if co.Lines != nil {
			o.SetFieldLines(maps.Clone(co.Lines))
		}
		dec.Objects = append(dec.Objects, o)
	}
	return dec, nil
}
