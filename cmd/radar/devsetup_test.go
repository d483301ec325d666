package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// An address in BUILDRISK_DEV_FAKE_ADDR is used as given, and a taken one
// is an error naming the variable, not a silent move to another port.
func TestListenDevFake(t *testing.T) {
	t.Parallel()

	t.Run("FromEnvironment", func(t *testing.T) {
		t.Parallel()
		l, err := listenDevFake(func(string) string { return "127.0.0.1:0" })
		require.NoError(t, err)
		require.NoError(t, l.Close())
	})

	t.Run("TakenIsAnError", func(t *testing.T) {
		t.Parallel()
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer taken.Close()
		_, err = listenDevFake(func(name string) string {
			require.Equal(t, devFakeAddrEnv, name)
			return taken.Addr().String()
		})
		require.ErrorContains(t, err, devFakeAddrEnv)
	})
}

// The api's address is held from the reservation until its release, which
// may be called twice.
func TestReserveDevAPIAddr(t *testing.T) {
	t.Parallel()
	release, err := reserveDevAPIAddr("127.0.0.1:0")
	require.NoError(t, err)
	release()
	release()

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	_, err = reserveDevAPIAddr(taken.Addr().String())
	require.ErrorContains(t, err, "BUILDRISK_HTTP_ADDR")
}
