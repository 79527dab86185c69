package lhc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
	"github.com/usher-vdi/usher/internal/sitegen"
)

// BenchmarkOpenCopy is what outage mode spends opening the local copy
// and reading it whole before it brokers from it: on the demo site, and
// with USHER_BENCH_LARGE=1 on the generated large one (100,000 users,
// 40,000 machines; a minute to set up).
func BenchmarkOpenCopy(b *testing.B) {
	sizes := map[string]sitegen.Sizes{"demo": sitegen.DemoSize}
	if os.Getenv("USHER_BENCH_LARGE") != "" {
		sizes["large"] = sitegen.LargeSize
	}
	for name, n := range sizes {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			primary, err := sqlitestore.Open(ctx, filepath.Join(dir, "site.db"), sqlitestore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer primary.Close()
			hash, err := auth.HashPassword("pw-bench-copy", auth.Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1, SaltLen: 16, KeyLen: 32})
			if err != nil {
				b.Fatal(err)
			}
			err = primary.Update(ctx, func(tx site.Tx) error {
				if bw, ok := tx.(site.BulkWriter); ok {
					bw.WriteInBulk()
				}
				_, err := site.ApplyConfig(ctx, tx, sitegen.Generate(n, hash), false)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := site.EnsureSecret(ctx, primary, site.SecretTokenKey, func() ([]byte, error) { return []byte(strings.Repeat("k", 32)), nil }); err != nil {
				b.Fatal(err)
			}
			st, err := readState(ctx, primary)
			if err != nil {
				b.Fatal(err)
			}
			path := filepath.Join(dir, CopyFile)
			if err := writeCopy(ctx, path+".new", st, nil); err != nil {
				b.Fatal(err)
			}
			if err := replace(path+".new", path); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				db, _, err := openCopy(ctx, path, nil, true)
				if err != nil {
					b.Fatal(err)
				}
				db.Close()
			}
		})
	}
}
