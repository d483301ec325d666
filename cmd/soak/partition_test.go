package main

import (
	"bufio"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) (string, chan net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	conns := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- c
			go func() {
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					_, _ = c.Write([]byte(line))
				}
			}()
		}
	}()
	return l.Addr().String(), conns
}

// A partition forwards nothing and closes nothing: the client's bytes are
// held, its socket stays open, and healing delivers what was held.
func TestBlackhole_PartitionHoldsAndHeals(t *testing.T) {
	t.Parallel()
	target, _ := echoServer(t)
	b, err := newBlackhole(target)
	require.NoError(t, err)
	t.Cleanup(b.close)

	c, err := net.Dial("tcp", b.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	_, err = c.Write([]byte("one\n"))
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "one\n", line)

	b.partition()
	_, err = c.Write([]byte("two\n"))
	require.NoError(t, err, "the socket stays open")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = r.ReadString('\n')
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "silence, not an error: %v", err)

	b.heal()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "two\n", line, "what was held arrives after the heal")
}

// Not even a close crosses a partition: the server ending the connection
// reaches the client only once healed.
func TestBlackhole_CloseWaitsForHeal(t *testing.T) {
	t.Parallel()
	target, conns := echoServer(t)
	b, err := newBlackhole(target)
	require.NoError(t, err)
	t.Cleanup(b.close)
	c, err := net.Dial("tcp", b.Addr())
	require.NoError(t, err)
	defer c.Close()
	server := <-conns

	b.partition()
	require.NoError(t, server.Close())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	buf := make([]byte, 1)
	_, err = c.Read(buf)
	var ne net.Error
	require.ErrorAs(t, err, &ne, "no EOF during the partition")
	require.True(t, ne.Timeout())

	b.heal()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(buf)
	require.Error(t, err)
	require.False(t, isTimeout(err), "the close arrives after the heal: %v", err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// The crash fault finds the postmaster and its children from the lock file
// and /proc.
func TestReadPostmasterPIDAndProcStat(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/postmaster.pid"
	require.NoError(t, writeFile(path, "4242\n/data\n1700000000\n5432\n"))
	pid, err := readPostmasterPID(path)
	require.NoError(t, err)
	require.Equal(t, 4242, pid)
	require.NoError(t, writeFile(path, "\n"))
	_, err = readPostmasterPID(path)
	require.Error(t, err)

	ppid, state, ok := procStat(1)
	require.True(t, ok)
	require.Zero(t, ppid)
	require.NotZero(t, state)
	require.True(t, alive(1))
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
