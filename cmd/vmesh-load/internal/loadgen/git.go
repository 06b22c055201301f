package loadgen

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// gitBranch is the branch the harness commits to; the bare repository's
// HEAD names it, so the vmesh child follows it with its default ref.
const gitBranch = "main"

// gitRepo is the harness's side of SourceGit: a bare repository (what vmesh
// fetches, like a git server) and a working clone the harness edits, commits
// in and pushes from, like a GitOps deployment.
type gitRepo struct {
	// Bare is the bare repository's path, the vmesh child's git repo.
	Bare string
	// Work is the working clone holding the config files.
	Work string
	// Secret signs webhook calls (X-Hub-Signature-256).
	Secret string
}

// newGitRepo creates dir/bare.git and the working clone dir/work.
func newGitRepo(ctx context.Context, dir string) (*gitRepo, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, fmt.Errorf("loadgen: -source git needs the git command: %w", err)
	}
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	g := &gitRepo{Bare: filepath.Join(dir, "bare.git"), Work: filepath.Join(dir, "work"), Secret: hex.EncodeToString(key)}
	if _, err := runGit(ctx, "", "init", "--quiet", "--bare", "--initial-branch="+gitBranch, g.Bare); err != nil {
		return nil, err
	}
	if _, err := runGit(ctx, "", "init", "--quiet", "--initial-branch="+gitBranch, g.Work); err != nil {
		return nil, err
	}
	if _, err := runGit(ctx, g.Work, "remote", "add", "origin", g.Bare); err != nil {
		return nil, err
	}
	return g, nil
}

// runGit runs git in dir (or no -C when dir is empty) with a fixed identity
// and no user or system configuration, and returns its standard output.
func runGit(ctx context.Context, dir string, args ...string) ([]byte, error) {
	full := []string{"-c", "user.name=vmesh-load", "-c", "user.email=vmesh-load@localhost", "-c", "commit.gpgsign=false"}
	if dir != "" {
		full = append(full, "-C", dir)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_TERMINAL_PROMPT=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("loadgen: git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// CommitAll commits everything in the working clone and pushes it.
func (g *gitRepo) CommitAll(ctx context.Context, msg string) error {
	if _, err := runGit(ctx, g.Work, "add", "--all"); err != nil {
		return err
	}
	return g.commitAndPush(ctx, msg)
}

// Commit commits the already written file rel (relative to the working
// clone, tracked) and pushes it.
func (g *gitRepo) Commit(ctx context.Context, rel, msg string) error {
	if _, err := runGit(ctx, g.Work, "add", "--", rel); err != nil {
		return err
	}
	return g.commitAndPush(ctx, msg)
}

func (g *gitRepo) commitAndPush(ctx context.Context, msg string) error {
	if _, err := runGit(ctx, g.Work, "commit", "--quiet", "--no-verify", "-m", msg); err != nil {
		return err
	}
	_, err := runGit(ctx, g.Work, "push", "--quiet", "origin", "HEAD:refs/heads/"+gitBranch)
	return err
}

// Head returns the working clone's HEAD commit.
func (g *gitRepo) Head(ctx context.Context) (string, error) {
	out, err := runGit(ctx, g.Work, "rev-parse", "HEAD")
	return strings.TrimSpace(string(out)), err
}

// Notify posts a GitHub-style push event, signed with the secret, to the
// vmesh webhook at httpAddr (/webhook/git), as a git server would after a
// push.
func (g *gitRepo) Notify(ctx context.Context, httpAddr, commit string) error {
	body, err := json.Marshal(map[string]string{"ref": "refs/heads/" + gitBranch, "after": commit})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+"/webhook/git", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("loadgen: webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", SignWebhook(g.Secret, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("loadgen: webhook: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("loadgen: webhook: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// SignWebhook returns the X-Hub-Signature-256 value GitHub and Gitea send:
// "sha256=" and the hex HMAC-SHA256 of the body keyed with the secret.
func SignWebhook(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}
