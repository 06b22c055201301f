package filestore

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/vmesh/vmesh/store"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// GitConfig configures a git source.
type GitConfig struct {
	// Repo is a repository URL (https://, ssh://, git@host:path) or a local path.
	Repo string
	// Ref is a branch, tag or full ref name; default "HEAD" (the remote's default branch).
	Ref string
	// Path is an optional sub-folder of the repository holding the config.
	Path string
	// Interval is how often to poll; default 30s. A failed fetch is retried
	// sooner, with backoff from 1s up to Interval.
	Interval time.Duration
	// Timeout bounds every git command, a fetch that keeps receiving data
	// included; default 10m.
	Timeout time.Duration
	// StallTimeout cuts a fetch that receives nothing for this long (a
	// remote that holds the connection open without answering, or stops
	// in the middle); it is reported at once and retried with backoff.
	// A slow fetch that keeps receiving runs on. Default 10s.
	StallTimeout time.Duration
	// WorkDir holds the local bare clone; default a folder under os.TempDir.
	WorkDir string
	// Username and Token authenticate HTTPS remotes (basic auth; Username
	// defaults to "git").
	Username, Token string
	// SSHKeyFile and KnownHostsFile authenticate SSH remotes.
	SSHKeyFile, KnownHostsFile string
	// Limits bound each file of a commit (size, documents, problems kept).
	Limits Limits
	// AllowEmpty applies a commit that defines no object at all while the
	// source serves some; by default such a commit is held and reported
	// (Argo CD's allowEmpty).
	AllowEmpty bool
	// DecodeCache, when set, serves the files of the commits read until
	// the first one applies, then is dropped; the caller saves it once the
	// control plane serves (DecodeCache.Save).
	DecodeCache *DecodeCache
}

// DefaultGitTimeout bounds each git command unless GitConfig.Timeout says
// otherwise. A stalled fetch is cut much sooner (DefaultGitStallTimeout);
// this bounds one that keeps receiving, so a slow first clone completes.
const DefaultGitTimeout = 10 * time.Minute

// GitSource polls a git repository and applies each new commit to the Store
// whole or not at all: a commit with any error is reported with its SHA,
// file and line while the last good commit keeps serving. It uses the git
// command line, so every transport and credential setup git supports works.
// The last applied commit is remembered in the local clone, so a restart
// serves it before the remote answers.
type GitSource struct {
	cfg     GitConfig
	src     store.Source
	store   *store.Store
	log     *slog.Logger
	trigger chan struct{}
	ready   chan struct{}
	once    sync.Once
	goodRef string // remembers the last applied commit in the clone

	// syncMu serialises Sync; tree and files are the last good commit's,
	// guarded by it.
	syncMu sync.Mutex
	tree   map[string]string // path -> blob of the config's files
	files  *fileSet
	// warned is a digest of the warnings last logged: they are logged
	// once per change, not per commit or push.
	warned string

	mu          sync.Mutex
	goodCommit  string
	lastCommit  string
	lastErrs    []store.ConfigError
	lastFetchAt time.Time
	// commitErrs are lastCommit's problems (nil when it applied), shown
	// again once a failed fetch recovers with the same commit.
	commitErrs  []store.ConfigError
	fetchFailed bool
	// fetchStarted is when the fetch under way began (zero: none);
	// fetchErr and fetchErrAt the last failed fetch's error, until a fetch
	// succeeds; failures counts failed fetches.
	fetchStarted time.Time
	fetchErr     string
	fetchErrAt   time.Time
	failures     uint64
	// stalled says the last fetch was cut for receiving nothing, until
	// one succeeds; stalls counts such fetches.
	stalled bool
	stalls  uint64
}

// FetchStatus is what a GitSource's fetches are doing, for /ready, the
// webhook and metrics.
type FetchStatus struct {
	// Running is how long the fetch under way has run; 0: none.
	Running time.Duration
	// LastError is the last fetch's error while fetches fail, since
	// LastErrorAt; empty once one succeeds.
	LastError   string
	LastErrorAt time.Time
	// Failures counts the failed fetches since start.
	Failures uint64
	// Stalled says the last fetch was cut for receiving nothing (its
	// LastError says from where and for how long), until one succeeds;
	// Stalls counts such fetches since start.
	Stalled bool
	Stalls  uint64
	// Timeout bounds every git command; StallTimeout cuts a fetch that
	// receives nothing for that long.
	Timeout, StallTimeout time.Duration
}

// FetchStatus reports the source's fetches.
func (g *GitSource) FetchStatus() FetchStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := FetchStatus{LastError: g.fetchErr, LastErrorAt: g.fetchErrAt, Failures: g.failures, Stalled: g.stalled, Stalls: g.stalls,
		Timeout: cmp.Or(g.cfg.Timeout, DefaultGitTimeout), StallTimeout: cmp.Or(g.cfg.StallTimeout, DefaultGitStallTimeout)}
	if !g.fetchStarted.IsZero() {
		st.Running = time.Since(g.fetchStarted)
	}
	return st
}

// NewGitSource checks the configuration and prepares the local clone folder.
// The source name is "git:<repo>".
func NewGitSource(cfg GitConfig, st *store.Store, logger *slog.Logger) (*GitSource, error) {
	if cfg.Repo == "" {
		return nil, fmt.Errorf("git source: repository is required")
	}
	cfg, err := moveURLCredentials(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("git"); err != nil {
		return nil, fmt.Errorf("git source: the git command is required: %w", err)
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("git source: %w", err)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("git source: timeout %s must be > 0", cfg.Timeout)
	}
	if cfg.StallTimeout < 0 {
		return nil, fmt.Errorf("git source: stall timeout %s must be > 0", cfg.StallTimeout)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.Ref == "" {
		cfg.Ref = "HEAD"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultGitTimeout
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultGitStallTimeout
	}
	cfg.Path = strings.Trim(path.Clean("/"+cfg.Path), "/")
	if cfg.WorkDir == "" {
		sum := sha256.Sum256([]byte(cfg.Repo))
		cfg.WorkDir = filepath.Join(os.TempDir(), "vmesh-git-"+hex.EncodeToString(sum[:8]))
	}
	if logger == nil {
		logger = slog.Default()
	}
	name := "git:" + redactURL(cfg.Repo)
	// One remembered commit per repository, ref and path: a clone reused
	// with another ref never serves the old one's commit.
	sum := sha256.Sum256([]byte(cfg.Repo + "\x00" + cfg.Ref + "\x00" + cfg.Path))
	return &GitSource{
		cfg:     cfg,
		src:     store.Source{Name: name, Class: store.ClassConfig},
		store:   st,
		log:     logger.With("source", name),
		trigger: make(chan struct{}, 1),
		ready:   make(chan struct{}),
		goodRef: "refs/vmesh/good/" + hex.EncodeToString(sum[:8]),
		tree:    map[string]string{},
		files:   newFileSet(cfg.Limits.MaxProblems),
	}, nil
}

// redactURL drops credentials embedded in a URL.
func redactURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if at := strings.LastIndex(u[i+3:], "@"); at >= 0 && !strings.Contains(u[i+3:i+3+at], "/") {
			return u[:i+3] + u[i+3+at+1:]
		}
	}
	return u
}

// Source returns the Store source this GitSource writes.
func (g *GitSource) Source() store.Source { return g.src }

// Ready is closed once the first good commit has reached the Store.
func (g *GitSource) Ready() <-chan struct{} { return g.ready }

// Trigger asks for a fetch now (e.g. from a webhook). It never blocks.
func (g *GitSource) Trigger() {
	select {
	case g.trigger <- struct{}{}:
	default:
	}
}

// GoodCommit returns the SHA of the commit currently serving, or "".
func (g *GitSource) GoodCommit() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.goodCommit
}

// Run serves the last commit the clone applied, if any, then polls until
// ctx is done. A failed fetch is reported and retried with backoff.
func (g *GitSource) Run(ctx context.Context) error {
	if err := g.init(ctx); err != nil {
		return err
	}
	g.restore(ctx)
	var backoff time.Duration
	for {
		wait := g.cfg.Interval
		// A failure is reported with when it is retried.
		if err := g.sync(ctx, nextBackoff(backoff, g.cfg.Interval)); err != nil && ctx.Err() == nil {
			backoff = nextBackoff(backoff, g.cfg.Interval)
			wait = backoff
			g.log.Warn("git sync failed; last good commit keeps serving", "error", err, "retry_in", wait)
		} else {
			backoff = 0
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		case <-g.trigger:
			timer.Stop()
		}
	}
}

// nextBackoff doubles the wait after a failure, from 1s up to ceiling.
func nextBackoff(prev, ceiling time.Duration) time.Duration {
	if prev == 0 {
		return min(time.Second, ceiling)
	}
	return min(2*prev, ceiling)
}

func (g *GitSource) init(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(g.cfg.WorkDir, "HEAD")); err == nil {
		return nil
	}
	if err := os.MkdirAll(g.cfg.WorkDir, 0o755); err != nil {
		return fmt.Errorf("git source: %w", err)
	}
	if _, err := g.git(ctx, nil, "init", "--bare", "--quiet"); err != nil {
		return fmt.Errorf("git source: init %s: %w", g.cfg.WorkDir, err)
	}
	return nil
}

// restore applies the last commit this clone applied for the configured
// repository, ref and path, without fetching: a restart while the remote
// is unreachable or stalled is ready at once and serves what it served.
func (g *GitSource) restore(ctx context.Context) {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	out, err := g.git(ctx, nil, "rev-parse", "--verify", "--quiet", g.goodRef+"^{commit}")
	if err != nil {
		return // nothing applied yet
	}
	commit := strings.TrimSpace(string(out))
	if err := g.applyCommit(ctx, commit); err != nil {
		g.log.Warn("cannot serve the last good commit from the local clone; waiting for the remote", "commit", commit, "error", err)
		return
	}
	if g.GoodCommit() == commit {
		g.log.Info("serving the last good commit from the local clone until the remote answers", "commit", commit)
	}
}

// Sync fetches the ref once and applies its commit if it is new.
func (g *GitSource) Sync(ctx context.Context) error { return g.sync(ctx, 0) }

// sync is Sync; retry, when set, is when a failed fetch is retried, for
// its report.
func (g *GitSource) sync(ctx context.Context, retry time.Duration) error {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	if err := g.init(ctx); err != nil {
		return err
	}
	first := g.GoodCommit() == ""
	start := time.Now()
	if first {
		g.log.Info("fetching repository for the first time", "ref", g.cfg.Ref, "workdir", g.cfg.WorkDir)
	}
	g.mu.Lock()
	g.fetchStarted = start
	g.mu.Unlock()
	commit, err := g.fetch(ctx)
	stalled := isStall(err) && ctx.Err() == nil
	if err != nil && retry > 0 && ctx.Err() == nil {
		err = fmt.Errorf("%w, retrying in %s", err, retry)
	}
	g.mu.Lock()
	g.fetchStarted = time.Time{}
	g.stalled = stalled
	if stalled {
		g.stalls++
	}
	if err != nil {
		g.fetchErr, g.fetchErrAt = err.Error(), time.Now()
		g.failures++
	} else {
		g.fetchErr, g.fetchErrAt = "", time.Time{}
	}
	g.mu.Unlock()
	if stalled {
		g.log.Warn("git fetch stalled; cut and retried", "error", err)
	}
	if err != nil {
		err = fmt.Errorf("%w; serving %s", err, shortOr(g.GoodCommit(), "nothing yet"))
		g.mu.Lock()
		g.fetchFailed = true
		g.mu.Unlock()
		g.setStatus(g.GoodCommit(), []store.ConfigError{store.ConfigError{Message: err.Error()}.Bounded()})
		return err
	}
	if first {
		g.log.Info("repository fetched", "ref", g.cfg.Ref, "commit", commit, "took", time.Since(start).Round(time.Millisecond))
	}
	g.mu.Lock()
	g.lastFetchAt = time.Now()
	same := commit == g.lastCommit
	recovered := g.fetchFailed
	g.fetchFailed = false
	commitErrs := g.commitErrs
	g.mu.Unlock()
	if same {
		if recovered {
			g.setStatus(g.GoodCommit(), commitErrs)
		}
		return nil
	}
	return g.applyCommit(ctx, commit)
}

// applyCommit applies commit whole, or reports why not and keeps the last
// good commit serving. It returns an error only when git fails.
func (g *GitSource) applyCommit(ctx context.Context, commit string) error {
	tree, set, remove, errs, err := g.apply(ctx, commit)
	if err != nil {
		return err
	}
	if len(errs) > 0 {
		for i := range errs {
			errs[i].Commit = commit
		}
		// The commit's own problems are its errors; that it is rejected
		// is the source's state, not one more error (one mistake counts
		// once).
		g.mu.Lock()
		g.lastCommit, g.commitErrs = commit, errs
		g.mu.Unlock()
		g.setStatus(g.GoodCommit(), errs)
		// One line per rejected commit, however many problems it has.
		g.log.Warn("commit rejected; the last good commit keeps serving", "commit", commit, "serving", g.GoodCommit(), "errors", errorStrings(errs))
		return nil
	}
	// The commit's objects, its SHA and its files' warnings in one
	// snapshot: no reader sees one commit's objects with another's SHA or
	// warnings.
	status := store.StatusChange{Revision: commit, Problems: slices.Clip(g.files.warnings())}
	if err := g.store.UpdateWithStatus(g.src, set, remove, status); err != nil {
		return err
	}
	g.tree = tree
	g.mu.Lock()
	g.goodCommit, g.lastCommit, g.commitErrs, g.lastErrs = commit, commit, nil, nil
	g.mu.Unlock()
	g.logWarnings()
	if _, err := g.git(ctx, nil, "update-ref", g.goodRef, commit); err != nil {
		g.log.Warn("cannot remember the applied commit in the clone; a restart waits for the remote", "error", err)
	}
	g.log.Info("applied commit", "commit", commit, "changed", len(set), "removed", len(remove))
	g.once.Do(func() { close(g.ready) })
	g.cfg.DecodeCache = nil // later commits' changed files decode afresh
	return nil
}

// errorStrings renders problems for one log line.
func errorStrings(errs []store.ConfigError) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}

// apply reads the files of commit that differ from the last good commit's
// and brings the file set to the commit, returning the commit's tree and
// what changes for the Store. When the commit has errors (in a changed file,
// a file over the limits, a key it now defines twice, or no object left
// without AllowEmpty) the file set is left at the last good commit and the
// errors are returned: a commit applies whole or not at all. Objects keep
// the commit they were read at.
func (g *GitSource) apply(ctx context.Context, commit string) (tree map[string]string, set []*store.Object, remove []store.Key, errs []store.ConfigError, err error) {
	lim := g.cfg.Limits
	entries, err := listGitTree(ctx, g.runner(), commit, g.cfg.Path)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tree = make(map[string]string, len(entries))
	var changed []GitFile
	var blobs []string
	for _, e := range entries {
		tree[e.path] = e.blob
		if g.tree[e.path] == e.blob {
			continue
		}
		if problem := e.problem(lim); problem != nil {
			errs = append(errs, *problem)
			continue
		}
		changed = append(changed, GitFile{Path: e.path})
		blobs = append(blobs, e.blob)
	}
	var removed []string
	for p := range g.tree {
		if _, ok := tree[p]; !ok {
			removed = append(removed, p)
		}
	}
	datas, err := readGitBlobs(ctx, g.runner(), commit, blobs, lim.MaxFileBytes)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	decoded := make([]Decoded, len(changed))
	parallel(len(changed), func(i int) {
		decoded[i] = g.cfg.DecodeCache.Decode(changed[i].Path, g.cfg.Path, datas[i], lim) // a nil cache decodes
		datas[i] = nil
	})
	for i := range changed {
		dec := decoded[i]
		errs = append(errs, dec.Errors...)
		for _, o := range dec.Objects {
			o.Origin.Source = g.src.Name
			o.Origin.Commit = commit
		}
		for j := range dec.Warnings {
			dec.Warnings[j].Commit = commit
		}
		decoded[i] = dec
	}
	if len(errs) > 0 {
		return nil, nil, nil, errs, nil
	}
	// Bring the file set to the commit, remembering the last good
	// versions to go back to if the commit defines a key twice or
	// empties the source.
	before := map[string]*fileState{}
	remember := func(p string) {
		if fs := g.files.files[p]; fs != nil {
			c := *fs // set changes the file's state in place
			before[p] = &c
		} else {
			before[p] = nil
		}
	}
	for _, f := range changed {
		remember(f.Path)
	}
	for _, p := range removed {
		remember(p)
	}
	served := g.files.defined
	for i, f := range changed {
		g.files.set(f.Path, fileStamp{}, decoded[i].Objects, nil, decoded[i].Warnings)
	}
	for _, p := range removed {
		g.files.drop(p)
	}
	set, remove = g.files.changes()
	errs = g.files.errors()
	if len(errs) == 0 && g.files.defined == 0 && served > 0 && !g.cfg.AllowEmpty {
		errs = []store.ConfigError{{Message: fmt.Sprintf("the commit defines no object: applying it would withdraw all %d; held (allowEmpty applies such a commit)", len(remove))}}
	}
	if len(errs) > 0 {
		for p, fs := range before {
			if fs == nil {
				g.files.drop(p)
			} else {
				g.files.set(p, fs.stamp, fs.good, nil, fs.warns)
			}
		}
		g.files.changes()
		return nil, nil, nil, errs, nil
	}
	return tree, set, remove, nil, nil
}

// fetch brings the configured ref into the local clone and returns its commit.
func (g *GitSource) fetch(ctx context.Context) (string, error) {
	// A forced fetch into our own ref follows force-pushes and rewrites.
	// The first one (the clone holds nothing yet, and a large repository
	// takes a while) logs git's progress.
	// Every fetch runs with --progress under a watchdog that cuts it
	// once it receives nothing for StallTimeout (curl's low-speed limit
	// does the same for HTTP(S)); a slow fetch that keeps receiving runs
	// up to Timeout.
	r := g.runner()
	r.stall, r.remote, r.progress = g.cfg.StallTimeout, redactURL(g.cfg.Repo), nil
	if _, err := g.git(ctx, nil, "rev-parse", "--verify", "--quiet", "refs/vmesh/target"); err != nil {
		r.progress = g.log
	}
	r.config = lowSpeedConfig(g.cfg.StallTimeout)
	args := append([]string(nil), "fetch", "--progress", "--force", "--no-tags", g.cfg.Repo, "+"+g.cfg.Ref+":refs/vmesh/target")
	if _, err := r.run(ctx, nil, args...); err != nil {
		if _, ok := errors.AsType[*stallError](err); ok {
			return "", err
		}
		return "", fmt.Errorf("fetch %s %s: %w", redactURL(g.cfg.Repo), g.cfg.Ref, err)
	}
	out, err := g.git(ctx, nil, "rev-parse", "refs/vmesh/target^{commit}")
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", g.cfg.Ref, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Check fetches the configured ref once and decodes it without touching the
// Store: for `vmesh validate --git-ref` and `vmesh diff`.
// The result's warnings are the files' own; Analyze adds the analysis.
func (g *GitSource) Check(ctx context.Context) (Loaded, error) {
	if err := g.init(ctx); err != nil {
		return Loaded{}, err
	}
	rev, err := ResolveRevision(ctx, g.cfg.Repo, g.cfg.Ref)
	if err != nil {
		return Loaded{}, err
	}
	g.cfg.Ref = rev
	commit, err := g.fetch(ctx)
	if err != nil {
		return Loaded{}, err
	}
	files, problems, err := readGitTree(ctx, g.runner(), commit, g.cfg.Path, g.cfg.Limits)
	if err != nil {
		return Loaded{}, err
	}
	l := decodeFiles(files, g.cfg.Path, g.cfg.Limits)
	l.Commit = commit
	l.Errors = append(problems, l.Errors...)
	for _, o := range l.Objects {
		o.Origin.Source = g.src.Name
		o.Origin.Commit = commit
	}
	for i := range l.Errors {
		l.Errors[i].Commit = commit
	}
	for i := range l.Warnings {
		l.Warnings[i].Commit = commit
	}
	return l, nil
}

// ResolveRevision turns a git revision expression (HEAD~1, a short SHA, a
// tag, a branch, origin/main) into the full SHA of its commit, when repo is
// a local repository; a remote repository can be asked for ref names only,
// so rev is returned unchanged for one. A revision the local repository
// has no commit for is an error naming both.
func ResolveRevision(ctx context.Context, repo, rev string) (string, error) {
	if fi, err := os.Stat(repo); err != nil || !fi.IsDir() {
		return rev, nil
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultGitTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("git revision %q: no such commit in %s", rev, repo)
	}
	return strings.TrimSpace(string(out)), nil
}

func shortOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s[:min(12, len(s))]
}

// setStatus reports the source's errors with the warnings of the commit
// it serves. Callers hold syncMu.
func (g *GitSource) setStatus(revision string, errs []store.ConfigError) {
	g.mu.Lock()
	g.lastErrs = errs
	held := ""
	if g.commitErrs != nil && g.lastCommit != g.goodCommit {
		held = RejectedCommitNote(g.lastCommit, g.goodCommit)
	}
	g.mu.Unlock()
	g.store.SetStatusHeld(g.src, revision, append(slices.Clip(errs), g.files.warnings()...), held)
}

// RejectedCommitNote is a git source's SourceStatus.Held while its latest
// commit is rejected: "commit <sha> rejected; still serving <sha>".
func RejectedCommitNote(rejected, serving string) string {
	return fmt.Sprintf("commit %.12s rejected; still serving %s", rejected, shortOr(serving, "nothing"))
}

// logWarnings logs the served commit's warnings when they changed since
// last logged. Callers hold syncMu.
func (g *GitSource) logWarnings() {
	var warns []string
	for _, w := range g.files.warnings() {
		if w.Severity == store.SeverityWarning { // infos are not logged
			warns = append(warns, w.Error())
		}
	}
	digest := strings.Join(warns, "\x00")
	if digest == g.warned {
		return
	}
	g.warned = digest
	if len(warns) == 0 {
		g.log.Info("config warnings cleared", "commit", g.GoodCommit())
		return
	}
	g.log.Warn("config warnings", "commit", g.GoodCommit(), "warnings", warns)
}

// GitFile is one file read from a git tree.
type GitFile struct {
	Path string
	Data []byte
}

// readGitTree returns the .yaml/.yml files of a commit under sub (all of
// the tree when sub is empty), in path order, and the files it did not
// read (over the size limit, or symbolic links).
func readGitTree(ctx context.Context, git gitRunner, commit, sub string, lim Limits) ([]GitFile, []store.ConfigError, error) {
	entries, err := listGitTree(ctx, git, commit, sub)
	if err != nil {
		return nil, nil, err
	}
	var blobs []string
	var files []GitFile
	var problems []store.ConfigError
	for _, e := range entries {
		if p := e.problem(lim); p != nil {
			problems = append(problems, *p)
			continue
		}
		blobs = append(blobs, e.blob)
		files = append(files, GitFile{Path: e.path})
	}
	datas, err := readGitBlobs(ctx, git, commit, blobs, lim.MaxFileBytes)
	if err != nil {
		return nil, nil, err
	}
	for i := range files {
		files[i].Data = datas[i]
	}
	return files, problems, nil
}

// gitEntry is a config file of a git tree: its path under the config
// folder, its blob, mode and size.
type gitEntry struct {
	path, blob, mode string
	size             int64
}

// problem says why an entry is not read: a symbolic link (git stores its
// target, not a file), or a blob over the size limit.
func (e gitEntry) problem(lim Limits) *store.ConfigError {
	switch {
	case e.mode == "120000":
		return &store.ConfigError{File: e.path, Message: "a symbolic link in the repository; only regular files are read from git"}
	case e.size > lim.MaxFileBytes:
		return &store.ConfigError{File: e.path, Message: tooLarge(e.size, lim.MaxFileBytes).Error()}
	}
	return nil
}

// listGitTree lists the .yaml/.yml files of a commit under sub, in path
// order, by their paths in the repository, with their sizes (read from
// the tree, before any blob).
func listGitTree(ctx context.Context, git gitRunner, commit, sub string) ([]gitEntry, error) {
	args := []string{"ls-tree", "-r", "-z", "-l", "--full-tree", commit}
	if sub != "" {
		args = append(args, "--", sub)
	}
	out, err := git.run(ctx, nil, args...)
	if err != nil {
		return nil, fmt.Errorf("list files of %s: %w", commit, err)
	}
	var entries []gitEntry
	for _, entry := range strings.Split(string(out), "\x00") {
		meta, name, ok := strings.Cut(entry, "\t")
		if !ok {
			continue
		}
		fields := strings.Fields(meta) // mode type sha size
		if len(fields) != 4 || fields[1] != "blob" {
			continue
		}
		base := path.Base(name)
		if strings.HasPrefix(base, ".") || !(strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml")) {
			continue
		}
		size, err := strconv.ParseInt(fields[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("list files of %s: size of %s: %w", commit, name, err)
		}
		// The path in the repository, --git-path included: one position
		// for a git object in serve, validate, diff, status and the
		// console (issue 45).
		entries = append(entries, gitEntry{path: name, blob: fields[2], mode: fields[0], size: size})
	}
	return entries, nil
}

// readGitBlobs reads blobs (of commit, for errors) with one git process;
// none may be larger than limit.
func readGitBlobs(ctx context.Context, git gitRunner, commit string, blobs []string, limit int64) ([][]byte, error) {
	if len(blobs) == 0 {
		return nil, nil
	}
	var batch bytes.Buffer
	for _, b := range blobs {
		batch.WriteString(b + "\n")
	}
	out, err := git.run(ctx, &batch, "cat-file", "--batch")
	if err != nil {
		return nil, fmt.Errorf("read files of %s: %w", commit, err)
	}
	r := bufio.NewReader(bytes.NewReader(out))
	datas := make([][]byte, len(blobs))
	for i := range blobs {
		header, err := r.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("read files of %s: %w", commit, err)
		}
		parts := strings.Fields(header)
		if len(parts) != 3 {
			return nil, fmt.Errorf("read files of %s: unexpected %s", commit, quote(header))
		}
		size, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read files of %s: %w", commit, err)
		}
		if size > limit {
			return nil, fmt.Errorf("read files of %s: blob %s: %w", commit, blobs[i], tooLarge(size, limit))
		}
		datas[i] = make([]byte, size)
		if _, err := io.ReadFull(r, datas[i]); err != nil {
			return nil, fmt.Errorf("read files of %s: %w", commit, err)
		}
		if _, err := r.Discard(1); err != nil {
			return nil, fmt.Errorf("read files of %s: %w", commit, err)
		}
	}
	return datas, nil
}

// DecodeFiles decodes a set of files as one source, within the default
// Limits: it returns all objects and every error, including keys defined
// twice. Paths are relative to the source's root (a root mesh.yaml is its
// mesh config).
func DecodeFiles(files []GitFile) ([]*store.Object, []store.ConfigError) {
	l := decodeFiles(files, "", DefaultLimits())
	return l.Objects, l.Errors
}

func decodeFiles(files []GitFile, root string, lim Limits) Loaded {
	lim = lim.withDefaults()
	var errs, warns []store.ConfigError
	var d dedup
	for _, f := range files {
		dec := DecodeSourceFile(f.Path, root, f.Data, lim)
		errs = d.add(dec.Objects, append(errs, dec.Errors...), lim.MaxProblems)
		warns = append(warns, dec.Warnings...)
	}
	return Loaded{Objects: d.objs, Errors: errs, Warnings: warns}
}

// runner returns the git runner for the clone, with the configured
// credentials and timeout.
func (g *GitSource) runner() gitRunner {
	var env []string
	if g.cfg.Token != "" {
		user := cmp.Or(g.cfg.Username, "git")
		cred := base64.StdEncoding.EncodeToString([]byte(user + ":" + g.cfg.Token))
		// Passed through the environment so the token never shows in `ps`.
		env = append(env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader",
			"GIT_CONFIG_VALUE_0=Authorization: Basic "+cred)
	}
	if g.cfg.SSHKeyFile != "" {
		ssh := "ssh -i " + shellQuote(g.cfg.SSHKeyFile) + " -o IdentitiesOnly=yes -o BatchMode=yes"
		if g.cfg.KnownHostsFile != "" {
			ssh += " -o UserKnownHostsFile=" + shellQuote(g.cfg.KnownHostsFile) + " -o StrictHostKeyChecking=yes"
		}
		env = append(env, "GIT_SSH_COMMAND="+ssh)
	}
	return gitRunner{dir: g.cfg.WorkDir, env: env, timeout: g.cfg.Timeout}
}

// git runs a git command in the work dir with the configured credentials.
func (g *GitSource) git(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	return g.runner().run(ctx, stdin, args...)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// gitRunner runs git commands on one repository, each within timeout.
type gitRunner struct {
	dir     string
	env     []string
	timeout time.Duration
	// progress, when set, logs the progress lines git writes on stderr
	// (a fetch run with --progress).
	progress *slog.Logger
	// stall, when set, cuts the command once it shows no progress for
	// that long (watchdog), reported as a *stallError naming remote.
	stall  time.Duration
	remote string
	// config is passed as -c key=value options.
	config []string
}

// run runs one git command. When it outlives the timeout (a remote that
// accepts the connection and never answers) or ctx ends, git and the
// helpers it started (git-remote-https, ssh) are killed as one process
// group, and the pipes they hold are closed a second later at most.
func (r gitRunner) run(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	tctx, cancel := context.WithTimeout(ctx, cmp.Or(r.timeout, DefaultGitTimeout))
	defer cancel()
	wctx, cut := context.WithCancel(tctx) // the watchdog's
	defer cut()
	gitArgs := []string{"--git-dir", r.dir}
	for _, kv := range r.config {
		gitArgs = append(gitArgs, "-c", kv)
	}
	cmd := exec.CommandContext(wctx, "git", append(gitArgs, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"GIT_TERMINAL_PROMPT=0"}, r.env...)...)
	cmd.Stdin = stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	stderr := &headWriter{max: 4 << 10}
	cmd.Stderr = stderr
	if r.progress != nil || r.stall > 0 {
		cmd.Stderr = &progressWriter{log: r.progress, rest: stderr}
	}
	out, stalled, err := r.watched(cmd, cut)
	if err != nil {
		if ctx.Err() == nil && (stalled || (r.stall > 0 && strings.Contains(stderr.String(), "Operation too slow"))) {
			return nil, &stallError{remote: r.remote, idle: r.stall}
		}
		if tctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("git %s: no answer within %s (a stalled remote?): %w", args[0], cmp.Or(r.timeout, DefaultGitTimeout), tctx.Err())
		}
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// watched runs cmd and returns its output; with a stall limit, under a
// watchdog that calls cut (stalled true) when it shows no progress for it.
func (r gitRunner) watched(cmd *exec.Cmd, cut func()) (out []byte, stalled bool, err error) {
	if r.stall <= 0 {
		out, err = cmd.Output()
		return out, false, err
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	wd := newWatchdog(r.stall)
	cmd.Stderr = wd.writer(cmd.Stderr)
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	done := make(chan struct{})
	var fired atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		wd.watch(cmd.Process.Pid, done, func() { fired.Store(true); cut() })
	})
	err = cmd.Wait()
	close(done)
	wg.Wait()
	return stdout.Bytes(), fired.Load(), err
}

// headWriter keeps the first max bytes written to it and counts the rest:
// a remote's chatter on stderr costs max.
type headWriter struct {
	max     int
	buf     []byte
	dropped int
}

func (w *headWriter) Write(p []byte) (int, error) {
	n := min(len(p), w.max-len(w.buf))
	w.buf = append(w.buf, p[:n]...)
	w.dropped += len(p) - n
	return len(p), nil
}

func (w *headWriter) String() string {
	if w.dropped > 0 {
		return string(w.buf) + fmt.Sprintf("… (%s more bytes)", formatCount(w.dropped))
	}
	return string(w.buf)
}

// ObjectsAt reads and decodes commit rev (a SHA, a short SHA, a tag or
// branch of the clone) without touching the Store, for `vmesh pin`: it
// returns the commit's full SHA and its objects, or an error when the
// commit is unknown or its config has errors.
func (g *GitSource) ObjectsAt(ctx context.Context, rev string) (string, []*store.Object, error) {
	if rev == "" || strings.HasPrefix(rev, "-") {
		return "", nil, fmt.Errorf("git revision %q: not a revision", rev)
	}
	out, err := g.git(ctx, nil, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	if err != nil {
		return "", nil, fmt.Errorf("git revision %q: no such commit in the clone: %w", rev, err)
	}
	commit := strings.TrimSpace(string(out))
	files, problems, err := readGitTree(ctx, g.runner(), commit, g.cfg.Path, g.cfg.Limits)
	if err != nil {
		return "", nil, err
	}
	l := decodeFiles(files, g.cfg.Path, g.cfg.Limits)
	if errs := append(problems, l.Errors...); len(errs) > 0 {
		for i := range errs {
			errs[i].Commit = commit
		}
		return "", nil, fmt.Errorf("commit %.12s has %d errors, first %s", commit, len(errs), errs[0].Error())
	}
	for _, o := range l.Objects {
		o.Origin.Source = g.src.Name
		o.Origin.Commit = commit
	}
	return commit, l.Objects, nil
}
