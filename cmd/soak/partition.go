package main

import (
	"net"
	"sync"
)

// blackhole is a TCP proxy in front of PostgreSQL for one process. While it
// is partitioned it forwards no byte in either direction but keeps both
// sockets open, the way a network partition looks to both ends: no error,
// no reset, only silence. Healing it forwards what was held back, as TCP
// delivers what it retransmits once the path is back. New connections made
// during a partition are accepted and are as silent.
type blackhole struct {
	listener net.Listener
	target   string

	mu          sync.Mutex
	partitioned bool
	healed      chan struct{} // closed when a partition ends
	conns       map[net.Conn]bool
	closed      bool
}

// newBlackhole listens on a free loopback port and forwards to target.
func newBlackhole(target string) (*blackhole, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &blackhole{listener: l, target: target, healed: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(b.healed)
	go b.serve()
	return b, nil
}

// Addr is the host:port the process connects to.
func (b *blackhole) Addr() string { return b.listener.Addr().String() }

func (b *blackhole) serve() {
	for {
		client, err := b.listener.Accept()
		if err != nil {
			return
		}
		go b.forward(client)
	}
}

// forward connects client to the target and copies both ways until either
// end closes, holding bytes back while partitioned.
func (b *blackhole) forward(client net.Conn) {
	server, err := net.Dial("tcp", b.target)
	if err != nil {
		// The server is down (an outage): the client sees it refused.
		_ = client.Close()
		return
	}
	if !b.track(client, server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		b.copy(dst, src)
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
	b.untrack(client, server)
}

// copy forwards src to dst, waiting before each write while partitioned.
func (b *blackhole) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			b.waitHealed()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// Not even the end of a connection crosses a partition.
			b.waitHealed()
			return
		}
	}
}

func (b *blackhole) waitHealed() {
	b.mu.Lock()
	ch := b.healed
	b.mu.Unlock()
	<-ch
}

// partition stops forwarding; heal resumes it.
func (b *blackhole) partition() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.partitioned {
		b.partitioned = true
		b.healed = make(chan struct{})
	}
}

func (b *blackhole) heal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.partitioned {
		b.partitioned = false
		close(b.healed)
	}
}

func (b *blackhole) track(conns ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	for _, c := range conns {
		b.conns[c] = true
	}
	return true
}

func (b *blackhole) untrack(conns ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range conns {
		delete(b.conns, c)
	}
}

// close heals, stops listening and closes every connection.
func (b *blackhole) close() {
	b.heal()
	_ = b.listener.Close()
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
}
