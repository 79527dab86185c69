package sqlitestore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

// BenchmarkApplyDemoSize applies the demo-size configuration into an empty
// database in one Update, as `usher apply` does on a new site.
func BenchmarkApplyDemoSize(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		s, err := sqlitestore.Open(ctx, filepath.Join(dir, fmt.Sprintf("site%d.db", i)), sqlitestore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		desired := storetest.GenerateConfig(storetest.DemoSize)
		b.StartTimer()
		if err := s.Update(ctx, func(tx site.Tx) error {
			_, err := site.ApplyConfig(ctx, tx, desired, false)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
}

// openDemo opens a database holding the demo-size configuration.
func openDemo(b *testing.B) *sqlitestore.Store {
	ctx := context.Background()
	s := MustOpen(b, filepath.Join(b.TempDir(), "site.db"))
	if err := s.Update(ctx, func(tx site.Tx) error {
		_, err := site.ApplyConfig(ctx, tx, storetest.GenerateConfig(storetest.DemoSize), false)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkLoadConfigDemoSize reads the whole demo-size configuration, as
// every admin write and every broker snapshot does.
func BenchmarkLoadConfigDemoSize(b *testing.B) {
	ctx := context.Background()
	s := openDemo(b)
	for b.Loop() {
		if err := s.View(ctx, func(tx site.Tx) error {
			_, err := site.LoadConfig(ctx, tx)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMutateDemoSize is one admin API write on the demo site: load,
// change one application, validate, diff and apply.
func BenchmarkMutateDemoSize(b *testing.B) {
	ctx := context.Background()
	s := openDemo(b)
	n := 0
	for b.Loop() {
		n++
		if err := s.Update(ctx, func(tx site.Tx) error {
			_, err := site.Mutate(ctx, tx, func(c *site.Config) error {
				c.Applications[0].Description = fmt.Sprint("edit ", n)
				return nil
			})
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}
