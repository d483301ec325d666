package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
)

// devFakeAddrEnv names the variable that moves dev's fake upstream, so two
// users of one machine each have their own (and neither reconfigures the
// other's through /__fake/config).
const devFakeAddrEnv = "BUILDRISK_DEV_FAKE_ADDR"

// devFakeURLFile is where `radar dev` writes the fake upstream's base URL,
// as it writes the token to devTokenFile, so the README's walk-through reads
// the address instead of assuming one.
const devFakeURLFile = ".radar/dev-fake-url"

// reserveDevAPIAddr binds the api's address (BUILDRISK_HTTP_ADDR) before
// dev starts anything, so a taken port is refused at once instead of after
// PostgreSQL started, migrated and seeded. It holds the port until release,
// which dev calls just before the api binds it for good; release may be
// called more than once.
func reserveDevAPIAddr(addr string) (release func(), err error) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return func() {}, fmt.Errorf("cannot listen on BUILDRISK_HTTP_ADDR %s (another radar dev? set BUILDRISK_HTTP_ADDR to a free address): %w", addr, err)
	}
	var once sync.Once
	return func() { once.Do(func() { _ = listener.Close() }) }, nil
}

// listenDevFake listens where dev serves its fake upstream. An address in
// BUILDRISK_DEV_FAKE_ADDR (read with getenv) is used as given: taken, it is
// an error. Without it dev keeps its default, devFakeUpstreamAddr, and
// moves to a free loopback port when that one is taken.
func listenDevFake(getenv func(string) string) (net.Listener, error) {
	if addr := getenv(devFakeAddrEnv); addr != "" {
		listener, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("cannot listen on %s %s for the fake upstream: %w", devFakeAddrEnv, addr, err)
		}
		return listener, nil
	}
	listener, err := net.Listen("tcp", devFakeUpstreamAddr)
	if err == nil {
		return listener, nil
	}
	listener, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("error listening for the fake upstream: %w", err)
	}
	return listener, nil
}

// writeDevFile writes content and a newline to path (its directory made
// private), for the walk-through to read, and returns how to remove it.
// Dev goes on without the file when it cannot be written: the banner says
// the same.
func writeDevFile(path, content string) (remove func()) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
		_ = os.WriteFile(path, []byte(content+"\n"), 0o600)
	}
	return func() { _ = os.Remove(path) }
}
