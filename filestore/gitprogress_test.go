package filestore_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/store"
)

// The first fetch into an empty clone logs git's progress, a phase's end
// included; later fetches log none.
func TestGitFirstFetchLogsProgress(t *testing.T) {
	repo := newGitRepo(t)
	files := map[string]string{}
	for i := range 150 { // more objects than fetch.unpackLimit: git indexes the pack and shows "Receiving objects"
		files[fmt.Sprintf("we-%02d.yaml", i)] = weYAML(fmt.Sprintf("we-%02d", i), fmt.Sprintf("10.0.0.%d", i+1))
	}
	repo.commit("first", files)
	var logs testenv.LogBuffer
	store := store.NewStore()
	src, err := filestore.NewGitSource(filestore.GitConfig{Repo: repo.dir, Ref: "refs/heads/main", WorkDir: filepath.Join(t.TempDir(), "clone")}, store, logs.Logger(slog.LevelInfo))
	if err != nil {
		t.Fatal(err)
	}
	must(t, src.Sync(context.Background()))
	if len(logs.Lines("fetching repository for the first time")) != 1 {
		t.Errorf("no first-fetch line:\n%s", strings.Join(logs.Lines(""), "\n"))
	}
	progress := logs.Lines("git fetch progress")
	done := false
	for _, l := range progress {
		if strings.Contains(l, `"phase":"Receiving objects"`) && strings.Contains(l, "100%") {
			done = true
		}
	}
	if !done {
		t.Errorf("no end of the receiving phase among the progress lines:\n%s", strings.Join(progress, "\n"))
	}
	if len(progress) > 20 {
		t.Errorf("%d progress lines for a small repository: a phase's lines are not rate-limited", len(progress))
	}
	repo.commit("second", map[string]string{"we-00.yaml": weYAML("we-00", "10.0.1.1")})
	must(t, src.Sync(context.Background()))
	if n := len(logs.Lines("git fetch progress")); n != len(progress) {
		t.Errorf("a later fetch logged %d more progress lines", n-len(progress))
	}
	if addressOf(store.Snapshot(), "we-00") != "10.0.1.1" {
		t.Error("second commit not applied")
	}
}
