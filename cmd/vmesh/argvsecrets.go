package main

import (
	"fmt"
	"net/url"
	"strings"
)

// refuseURLPassword refuses a URL given on the command line that carries
// a password: every local user reads a process's arguments in
// /proc/PID/cmdline (ps). The password goes in a file instead.
func refuseURLPassword(flag, raw string) error {
	if !strings.Contains(raw, "://") {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return nil
	}
	if _, ok := u.User.Password(); !ok {
		return nil
	}
	return fmt.Errorf("%s: the URL carries a password, which every user of this host can read in the process's command line (ps, /proc/PID/cmdline): "+
		"pass the URL without it and the password or token in a file with --git-token-file FILE (and --git-username USER), or put the URL in the config file (--config, git.repo)", flag)
}
