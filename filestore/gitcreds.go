package filestore

import (
	"fmt"
	"net/url"
	"strings"
)

// moveURLCredentials takes a password (or token) written into an HTTP(S)
// repository URL out of it and into Username and Token, which reach git
// through its environment (see GitSource.runner): the URL itself is in the
// argv of git and of git-remote-https, which every local user reads in
// /proc/PID/cmdline. A Token already configured wins over the URL's. The
// local clone's folder and remembered commit are keyed by the URL without
// the password, so a new password keeps them.
func moveURLCredentials(cfg GitConfig) (GitConfig, error) {
	if !strings.Contains(cfg.Repo, "://") {
		return cfg, nil
	}
	u, err := url.Parse(cfg.Repo)
	if err != nil || u.User == nil {
		return cfg, nil
	}
	pass, ok := u.User.Password()
	if !ok {
		return cfg, nil // a user name alone is no secret
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return cfg, fmt.Errorf("git source: a password in a %s:// URL cannot be kept off git's command line: use an SSH key (SSHKeyFile)", u.Scheme)
	}
	if cfg.Token == "" {
		cfg.Token = pass
		if cfg.Username == "" {
			cfg.Username = u.User.Username()
		}
	}
	cfg.Repo = redactURL(cfg.Repo)
	return cfg, nil
}
