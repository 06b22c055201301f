package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Durations are strings in both formats, text is chosen explicitly or on a
// terminal (a buffer is none: json), and a bad format or level is refused.
func TestLogFormats(t *testing.T) {
	var buf bytes.Buffer
	l, err := (&logFlags{level: "info"}).logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("pushed config", "took", 1500*time.Millisecond)
	var entry map[string]any
	if err := json.Unmarshal(buf.Bytes(), &entry); err != nil {
		t.Fatalf("not a JSON line by default off a terminal: %q", buf.String())
	}
	if entry["took"] != "1.5s" {
		t.Errorf("took = %#v, want \"1.5s\"", entry["took"])
	}
	buf.Reset()
	l, err = (&logFlags{level: "debug", format: "text"}).logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	l.Debug("fetched", "took", 250*time.Millisecond)
	if got := buf.String(); !strings.Contains(got, "msg=fetched took=250ms") {
		t.Errorf("text line %q", got)
	}
	for _, bad := range []logFlags{{level: "info", format: "xml"}, {level: "loud"}} {
		if _, err := bad.logger(&buf); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
