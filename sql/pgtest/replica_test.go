package pgtest

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A failover through the multi-host URL, in both replication modes. With a
// synchronous standby, every commit the primary acknowledged is on the
// promoted standby. With an asynchronous one whose link was cut (a standby
// lagging when the primary dies), the commits acknowledged after the cut
// are missing from it: the loss the service must detect. Either way the
// URL reaches the promoted standby, which keeps the cluster's system
// identifier on a new timeline.
func TestReplicatedFailover(t *testing.T) {
	t.Parallel()

	for _, synchronous := range []bool{false, true} {
		t.Run(map[bool]string{false: "Async", true: "Synchronous"}[synchronous], func(t *testing.T) {
			t.Parallel()

			ctx := context.Background()
			r := StartReplicated(t, &ReplicatedOpts{Synchronous: synchronous})
			url := r.URL("postgres")
			require.Equal(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
				r.Primary.Port(), r.Standby.Port()), url)

			conn, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			before := readIdentity(t, conn)
			_, err = conn.Exec(ctx, "CREATE TABLE acked (n int); INSERT INTO acked VALUES (1)")
			require.NoError(t, err)
			want := []int32{1, 2}
			if !synchronous {
				// The standby stops receiving WAL: commit 2 is acknowledged
				// by the primary alone.
				require.NoError(t, r.CatchUp(ctx))
				require.NoError(t, r.CutReplication(ctx))
				want = []int32{1}
			}
			_, err = conn.Exec(ctx, "INSERT INTO acked VALUES (2)")
			require.NoError(t, err)

			require.NoError(t, r.Failover(ctx))
			require.Error(t, conn.Ping(ctx), "the primary's connections broke")
			_ = conn.Close(ctx)

			conn, err = pgx.Connect(ctx, url)
			require.NoError(t, err)
			defer conn.Close(ctx)
			require.Equal(t, r.Standby.Port(), conn.PgConn().Conn().RemoteAddr().(*net.TCPAddr).Port, "the URL reaches the promoted standby")
			_, err = conn.Exec(ctx, "INSERT INTO acked VALUES (3)")
			require.NoError(t, err, "the promoted standby takes writes")
			rows, err := conn.Query(ctx, "SELECT n FROM acked WHERE n < 3 ORDER BY n")
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			require.NoError(t, err)
			require.Equal(t, want, got)

			after := readIdentity(t, conn)
			require.Equal(t, before[0], after[0], "same system identifier")
			require.Equal(t, before[1]+1, after[1], "next timeline")
		})
	}
}

// readIdentity reads the system identifier and the current timeline of the
// primary conn is connected to.
func readIdentity(t *testing.T, conn *pgx.Conn) [2]int64 {
	t.Helper()
	var id [2]int64
	require.NoError(t, conn.QueryRow(context.Background(),
		`SELECT system_identifier, ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint FROM pg_control_system()`).Scan(&id[0], &id[1]))
	return id
}
