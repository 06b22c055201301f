package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
)

// logFlags are the logging flags of the long-running commands (serve,
// agent).
type logFlags struct {
	level, format string
}

func (f *logFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.level, "log-level", "info", "log level: debug, info, warn, error")
	cmd.Flags().StringVar(&f.format, "log-format", "", "log format: text or json (default: text on a terminal, json otherwise)")
}

// logger builds the command's logger on w. Durations are written as
// strings ("1.5s"), not nanoseconds, in both formats.
func (f *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			return slog.String(a.Key, a.Value.Duration().String())
		}
		return a
	}}
	format := f.format
	if format == "" {
		format = "json"
		if isTerminal(w) {
			format = "text"
		}
	}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.format)
}

// isTerminal reports whether w is a character device (an operator's
// terminal) rather than a file, a pipe or the journal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
