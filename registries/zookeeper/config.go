package zookeeper

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config configures one ZooKeeper (Dubbo) registry entry.
type Config struct {
	// Servers are the ZooKeeper addresses, host:port.
	Servers []string `yaml:"servers" json:"servers"`
	// Root is Dubbo's registry root node (Dubbo's registry "group"), default "dubbo".
	Root string `yaml:"root,omitempty" json:"root,omitempty"`
	// ServicesRoot holds Dubbo 3 application-level instances, default "services".
	ServicesRoot string `yaml:"servicesRoot,omitempty" json:"servicesRoot,omitempty"`
	// HostSuffix is appended to every generated host (see README.md), default none.
	HostSuffix string `yaml:"hostSuffix,omitempty" json:"hostSuffix,omitempty"`
	// SessionTimeout is the ZooKeeper session timeout, default 10s.
	SessionTimeout time.Duration `yaml:"sessionTimeout,omitempty" json:"sessionTimeout,omitempty"`
	// DisableApplications turns Dubbo 3 application-level discovery off.
	DisableApplications bool `yaml:"disableApplicationDiscovery,omitempty" json:"disableApplicationDiscovery,omitempty"`
	// InitialSyncTimeout bounds how long the first set waits for every
	// watch to report once, default 5s.
	InitialSyncTimeout time.Duration `yaml:"initialSyncTimeout,omitempty" json:"initialSyncTimeout,omitempty"`
	// RetryMax caps the reconnect backoff, default 10s.
	RetryMax time.Duration `yaml:"retryMax,omitempty" json:"retryMax,omitempty"`
}

// withDefaults fills unset fields and validates.
func (c Config) withDefaults() (Config, error) {
	if len(c.Servers) == 0 {
		return c, errors.New("zookeeper: no servers")
	}
	for _, s := range c.Servers {
		if s == "" || strings.ContainsAny(s, " /") {
			return c, fmt.Errorf("zookeeper: bad server address %q (want host:port)", s)
		}
	}
	c.Root = strings.Trim(c.Root, "/")
	if c.Root == "" {
		c.Root = "dubbo"
	}
	c.ServicesRoot = strings.Trim(c.ServicesRoot, "/")
	if c.ServicesRoot == "" {
		c.ServicesRoot = "services"
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.InitialSyncTimeout <= 0 {
		c.InitialSyncTimeout = 5 * time.Second
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 10 * time.Second
	}
	return c, nil
}
