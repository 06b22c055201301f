package scripttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/internal/testenv"
)

// TestFailingScriptShowsCommandAndLog runs a script that sources
// examples/lib.sh, writes a 40-line vmesh log and then runs a failing
// command under `set -e`: its output must name the command and its exit
// status, and end with the log's last 30 lines.
func TestFailingScriptShowsCommandAndLog(t *testing.T) {
	root := testenv.RepoRoot(t)
	script := filepath.Join(t.TempDir(), "fails.sh")
	body := `set -euo pipefail
cd "$1"
source examples/lib.sh
for i in $(seq 1 40); do echo "log line $i"; done > "$work/vmesh.log"
curl -fs http://127.0.0.1:1/never >/dev/null
echo "not reached"
`
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", script, root).CombinedOutput()
	if err == nil {
		t.Fatalf("the script succeeded:\n%s", out)
	}
	text := string(out)
	if !strings.Contains(text, "FAIL: `curl -fs http://127.0.0.1:1/never > /dev/null` exited 7") {
		t.Errorf("the failing command is not named:\n%s", text)
	}
	if strings.Contains(text, "not reached") {
		t.Errorf("the script went on after the failure:\n%s", text)
	}
	for i := 11; i <= 40; i++ {
		if !strings.Contains(text, fmt.Sprintf("log line %d\n", i)) {
			t.Errorf("log line %d missing:\n%s", i, text)
		}
	}
	if strings.Contains(text, "log line 10\n") {
		t.Errorf("more than the last 30 log lines:\n%s", text)
	}
}

// TestStartRetryingStartsAgainWhenTheServerExits: start_retrying runs START
// again when the server it started exits before READY holds (its port was
// taken), and returns once READY holds.
func TestStartRetryingStartsAgainWhenTheServerExits(t *testing.T) {
	root := testenv.RepoRoot(t)
	script := filepath.Join(t.TempDir(), "retry.sh")
	body := `set -euo pipefail
cd "$1"
source examples/lib.sh
tries=0
start() {
  tries=$((tries + 1))
  if [ "$tries" -lt 2 ]; then (exit 3) & else sleep 30 & fi
  server_pid=$!
  pids+=($server_pid)
}
ready() { [ "$tries" -ge 2 ]; }
start_retrying demo "$work/none.log" start ready
echo "started after $tries tries"
`
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", script, root).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "demo exited at start (try 1 of 3)") || !strings.Contains(string(out), "started after 2 tries") {
		t.Fatalf("err %v, output:\n%s", err, out)
	}
}
