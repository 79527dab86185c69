package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
)

// TestSizePool: a pool is fitted to the room the server leaves the role
// (its CONNECTION LIMIT here, which stands for max_connections), never
// below the floor: a server without room for the floor stops the command
// with the numbers and what to change.
func TestSizePool(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	MustOpen(t, dsn) // migrates the schema the roles get

	t.Run("ServerRoom", func(t *testing.T) {
		n, room, err := pgstore.SizePool(ctx, dsn, 8)
		if err != nil {
			t.Fatal(err)
		}
		if room.MaxConnections <= 0 || room.Reserved < 0 || room.InUse < 0 ||
			room.Free != room.MaxConnections-room.Reserved-room.InUse && room.Free != 0 {
			t.Errorf("room %+v does not add up", room)
		}
		if want := min(8, room.Free); room.Free >= pgstore.DefaultPoolFloor && n != want {
			t.Errorf("pool of %d for a want of 8 and %d free, want %d", n, room.Free, want)
		}
	})

	limited := limitedRole(t, dsn, 10)
	for _, c := range []struct {
		name       string
		dsn        string
		want, held int
		pool       int // 0: fails
	}{
		{"RoomForAll", limited, 8, 0, 8},
		{"FitsTheRoom", limited, 16, 0, 10},
		{"FitsWhatOthersLeave", limited, 16, 4, 6},
		{"DefaultFromTheDSN", setting(t, limited, "pool_max_conns", "7"), 0, 0, 7},
		{"DefaultMaxConns", limited, 0, 3, 7},
		{"FloorDoesNotFit", limited, 16, 7, 0},
		{"SmallWantFitsBelowTheFloor", limited, 2, 7, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The last case's connections, closed, leave the server a
			// moment after: counted in use until then.
			waitRoleConnections(t, dsn, limited, 0)
			for range c.held {
				conn, err := pgx.Connect(ctx, limited)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
			}
			n, room, err := pgstore.SizePool(ctx, c.dsn, c.want)
			if c.pool == 0 {
				if err == nil {
					t.Fatalf("pool of %d (room %+v), want a refusal: the floor does not fit", n, room)
				}
				for _, part := range []string{"CONNECTION LIMIT 10", "3 more connections", "7 in use", "ALTER ROLE"} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("refusal %q does not say %q", err, part)
					}
				}
				if !errors.Is(err, site.ErrConnLimit) {
					t.Errorf("refusal %v does not match site.ErrConnLimit", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != c.pool {
				t.Errorf("pool of %d (room %+v), want %d", n, room, c.pool)
			}
		})
	}

	// A server that refuses even the sizing connection says so.
	full := limitedRole(t, dsn, 0)
	if _, _, err := pgstore.SizePool(ctx, full, 8); !errors.Is(err, site.ErrConnLimit) || !strings.Contains(err.Error(), "53300") {
		t.Errorf("SizePool on a role that may not connect: %v, want site.ErrConnLimit naming 53300", err)
	}
}

// waitRoleConnections waits until the server counts n connections of
// roleDSN's user, asking through dsn.
func waitRoleConnections(t *testing.T, dsn, roleDSN string, n int) {
	t.Helper()
	cfg, err := pgx.ParseConfig(roleDSN)
	if err != nil {
		t.Fatal(err)
	}
	waitForActivity(t, dsn, fmt.Sprintf("%d connections of role %s", n, cfg.User), func(have int) bool { return have == n },
		"SELECT count(*) FROM pg_stat_activity WHERE usename = $1", cfg.User)
}

// TestSizePoolOfAServerThatDoesNotAnswer: a server that cannot be
// reached is unavailable (EUnavailable: a broker starting before its site
// DB tries again), not a limit, and its error names no password.
func TestSizePoolOfAServerThatDoesNotAnswer(t *testing.T) {
	_, _, err := pgstore.SizePool(t.Context(), "postgres://alice:s3cret@127.0.0.1:1/site?connect_timeout=2", 8)
	if err == nil {
		t.Fatal("SizePool on a closed port: no error")
	}
	if got := site.ErrorCode(err); got != site.EUnavailable {
		t.Errorf("SizePool on a closed port: code %q (%v), want %q", got, err, site.EUnavailable)
	}
	if errors.Is(err, site.ErrConnLimit) {
		t.Errorf("SizePool on a closed port matches site.ErrConnLimit: %v", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("SizePool's error names the password: %v", err)
	}
}
