package filestore

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	// Interval is how often to poll; default 30s.
	Interval time.Duration
	// WorkDir holds the local bare clone; default a folder under os.TempDir.
	WorkDir string
	// Username and Token authenticate HTTPS remotes (basic auth; Username
	// defaults to "git").
	Username, Token string
	// SSHKeyFile and KnownHostsFile authenticate SSH remotes.
	SSHKeyFile, KnownHostsFile string
}

// GitSource polls a git repository and applies each new commit to the Store
// whole or not at all: a commit with any error is reported with its SHA,
// file and line while the last good commit keeps serving. It uses the git
// command line, so every transport and credential setup git supports works.
type GitSource struct {
	cfg     GitConfig
	src     Source
	store   *Store
	log     *slog.Logger
	trigger chan struct{}
	ready   chan struct{}
	once    sync.Once

	// syncMu serialises Sync; tree and files are the last good commit's,
	// guarded by it.
	syncMu sync.Mutex
	tree   map[string]string // path -> blob of the config's files
	files  *fileSet

	mu          sync.Mutex
	goodCommit  string
	lastCommit  string
	lastErrs    []ConfigError
	lastFetchAt time.Time
}

// NewGitSource checks the configuration and prepares the local clone folder.
// The source name is "git:<repo>".
func NewGitSource(cfg GitConfig, store *Store, logger *slog.Logger) (*GitSource, error) {
	if cfg.Repo == "" {
		return nil, fmt.Errorf("git source: repository is required")
	}
	if _, err := exec.LookPath("git"); err != nil {
		return nil, fmt.Errorf("git source: the git command is required: %w", err)
	}
	if cfg.Ref == "" {
		cfg.Ref = "HEAD"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
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
	return &GitSource{
		cfg:     cfg,
		src:     Source{Name: name, Class: ClassConfig},
		store:   store,
		log:     logger.With("source", name),
		trigger: make(chan struct{}, 1),
		ready:   make(chan struct{}),
		tree:    map[string]string{},
		files:   newFileSet(),
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
func (g *GitSource) Source() Source { return g.src }

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

// Run polls until ctx is done.
func (g *GitSource) Run(ctx context.Context) error {
	if err := g.init(ctx); err != nil {
		return err
	}
	ticker := time.NewTicker(g.cfg.Interval)
	defer ticker.Stop()
	for {
		if err := g.Sync(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("git sync failed; last good commit keeps serving", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-g.trigger:
		}
	}
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

// Sync fetches the ref once and applies its commit if it is new.
func (g *GitSource) Sync(ctx context.Context) error {
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
	commit, err := g.fetch(ctx)
	if err != nil {
		g.setStatus(g.GoodCommit(), []ConfigError{{Message: err.Error()}})
		return err
	}
	if first {
		g.log.Info("repository fetched", "ref", g.cfg.Ref, "commit", commit, "took", time.Since(start).Round(time.Millisecond))
	}
	g.mu.Lock()
	g.lastFetchAt = time.Now()
	same := commit == g.lastCommit
	g.mu.Unlock()
	if same {
		return nil
	}
	tree, set, remove, errs, err := g.apply(ctx, commit)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.lastCommit = commit
	g.mu.Unlock()
	if len(errs) > 0 {
		for i := range errs {
			errs[i].Commit = commit
		}
		errs = append(errs, ConfigError{Commit: commit, Message: fmt.Sprintf("commit rejected; still serving %s", shortOr(g.GoodCommit(), "nothing"))})
		g.setStatus(g.GoodCommit(), errs)
		for _, e := range errs {
			g.log.Warn("config error", "commit", commit, "error", e.Error())
		}
		return nil
	}
	if err := g.store.Update(g.src, set, remove); err != nil {
		return err
	}
	g.tree = tree
	g.mu.Lock()
	g.goodCommit = commit
	g.mu.Unlock()
	g.setStatus(commit, nil)
	g.log.Info("applied commit", "commit", commit, "changed", len(set), "removed", len(remove))
	g.once.Do(func() { close(g.ready) })
	return nil
}

// apply reads the files of commit that differ from the last good commit's
// and brings the file set to the commit, returning the commit's tree and
// what changes for the Store. When the commit has errors (in a changed file,
// or a key it now defines twice) the file set is left at the last good
// commit and the errors are returned: a commit applies whole or not at
// all. Objects keep the commit they were read at.
func (g *GitSource) apply(ctx context.Context, commit string) (tree map[string]string, set []*Object, remove []Key, errs []ConfigError, err error) {
	entries, err := listGitTree(ctx, g.cfg.WorkDir, commit, g.cfg.Path)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tree = make(map[string]string, len(entries))
	var changed []GitFile
	var blobs []string
	for _, e := range entries {
		tree[e.path] = e.blob
		if g.tree[e.path] != e.blob {
			changed = append(changed, GitFile{Path: e.path})
			blobs = append(blobs, e.blob)
		}
	}
	var removed []string
	for p := range g.tree {
		if _, ok := tree[p]; !ok {
			removed = append(removed, p)
		}
	}
	datas, err := readGitBlobs(ctx, g.cfg.WorkDir, commit, blobs)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	decoded := make([][]*Object, len(changed))
	for i := range changed {
		objs, fe := Decode(changed[i].Path, datas[i])
		errs = append(errs, fe...)
		for _, o := range objs {
			o.Origin.Source = g.src.Name
			o.Origin.Commit = commit
		}
		decoded[i] = objs
	}
	if len(errs) > 0 {
		return nil, nil, nil, errs, nil
	}
	// Bring the file set to the commit, remembering the last good
	// versions to go back to if the commit defines a key twice.
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
	for i, f := range changed {
		g.files.set(f.Path, fileStamp{}, decoded[i], nil)
	}
	for _, p := range removed {
		g.files.drop(p)
	}
	set, remove = g.files.changes()
	if errs = g.files.errors(); len(errs) > 0 {
		for p, fs := range before {
			if fs == nil {
				g.files.drop(p)
			} else {
				g.files.set(p, fs.stamp, fs.good, nil)
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
	if _, err := g.git(ctx, nil, "fetch", "--quiet", "--force", "--no-tags", g.cfg.Repo, "+"+g.cfg.Ref+":refs/vmesh/target"); err != nil {
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
func (g *GitSource) Check(ctx context.Context) (string, []*Object, []ConfigError, error) {
	if err := g.init(ctx); err != nil {
		return "", nil, nil, err
	}
	commit, err := g.fetch(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	files, err := ReadGitTree(ctx, g.cfg.WorkDir, commit, g.cfg.Path)
	if err != nil {
		return "", nil, nil, err
	}
	objs, errs := DecodeFiles(files)
	for _, o := range objs {
		o.Origin.Source = g.src.Name
		o.Origin.Commit = commit
	}
	for i := range errs {
		errs[i].Commit = commit
	}
	return commit, objs, errs, nil
}

func shortOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s[:min(12, len(s))]
}

func (g *GitSource) setStatus(revision string, errs []ConfigError) {
	g.mu.Lock()
	g.lastErrs = errs
	g.mu.Unlock()
	g.store.SetStatus(g.src, revision, errs)
}

// GitFile is one file read from a git tree.
type GitFile struct {
	Path string
	Data []byte
}

// ReadGitTree returns the .yaml/.yml files of a commit under sub (all of the
// tree when sub is empty), in path order, from the repository at gitDir.
func ReadGitTree(ctx context.Context, gitDir, commit, sub string) ([]GitFile, error) {
	entries, err := listGitTree(ctx, gitDir, commit, sub)
	if err != nil {
		return nil, err
	}
	blobs := make([]string, len(entries))
	files := make([]GitFile, len(entries))
	for i, e := range entries {
		blobs[i], files[i].Path = e.blob, e.path
	}
	datas, err := readGitBlobs(ctx, gitDir, commit, blobs)
	if err != nil {
		return nil, err
	}
	for i := range files {
		files[i].Data = datas[i]
	}
	return files, nil
}

// gitEntry is a config file of a git tree: its path under the config
// folder and its blob.
type gitEntry struct{ path, blob string }

// listGitTree lists the .yaml/.yml files of a commit under sub, in path
// order.
func listGitTree(ctx context.Context, gitDir, commit, sub string) ([]gitEntry, error) {
	args := []string{"ls-tree", "-r", "-z", "--full-tree", commit}
	if sub != "" {
		args = append(args, "--", sub)
	}
	out, err := runGit(ctx, gitDir, nil, nil, args...)
	if err != nil {
		return nil, fmt.Errorf("list files of %s: %w", commit, err)
	}
	var entries []gitEntry
	for _, entry := range strings.Split(string(out), "\x00") {
		meta, name, ok := strings.Cut(entry, "\t")
		if !ok {
			continue
		}
		fields := strings.Fields(meta) // mode type sha
		if len(fields) != 3 || fields[1] != "blob" {
			continue
		}
		base := path.Base(name)
		if strings.HasPrefix(base, ".") || !(strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml")) {
			continue
		}
		rel := name
		if sub != "" {
			rel = strings.TrimPrefix(strings.TrimPrefix(name, sub), "/")
		}
		entries = append(entries, gitEntry{path: rel, blob: fields[2]})
	}
	return entries, nil
}

// readGitBlobs reads blobs (of commit, for errors) with one git process.
func readGitBlobs(ctx context.Context, gitDir, commit string, blobs []string) ([][]byte, error) {
	if len(blobs) == 0 {
		return nil, nil
	}
	var batch bytes.Buffer
	for _, b := range blobs {
		batch.WriteString(b + "\n")
	}
	out, err := runGit(ctx, gitDir, nil, &batch, "cat-file", "--batch")
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
			return nil, fmt.Errorf("read files of %s: unexpected %q", commit, header)
		}
		size, err := strconv.Atoi(parts[2])
		if err != nil {
			return nil, fmt.Errorf("read files of %s: %w", commit, err)
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

// DecodeFiles decodes a set of files as one source: it returns all objects
// and every error, including keys defined twice.
func DecodeFiles(files []GitFile) ([]*Object, []ConfigError) {
	var errs []ConfigError
	var d dedup
	for _, f := range files {
		fo, fe := Decode(f.Path, f.Data)
		errs = d.add(fo, append(errs, fe...))
	}
	return d.objs, errs
}

// git runs a git command in the work dir with the configured credentials.
func (g *GitSource) git(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
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
	return runGit(ctx, g.cfg.WorkDir, env, stdin, args...)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func runGit(ctx context.Context, dir string, env []string, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"--git-dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"GIT_TERMINAL_PROMPT=0"}, env...)...)
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
