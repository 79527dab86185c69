package storetest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

func testSecrets(t *testing.T, open func(*testing.T) site.Store) {
	s := openBase(t, open)

	t.Run("UnsetIsNotFound", func(t *testing.T) {
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := tx.Secret(ctx, "token-key")
			wantCode(t, err, site.ENotFound)
			return nil
		})
	})

	t.Run("SetThenReadMovesTheVersionOnce", func(t *testing.T) {
		v := version(t, s)
		key := []byte{0, 1, 2, 0xff, 'k'}
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetSecret(ctx, "token-key", key) })
		wantVersion(t, s, v+1)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.Secret(ctx, "token-key")
			if err != nil || !bytes.Equal(got, key) {
				t.Errorf("secret = %x, %v; want %x", got, err, key)
			}
			return nil
		})
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetSecret(ctx, "token-key", []byte("rotated")) })
		wantVersion(t, s, v+2)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.Secret(ctx, "token-key")
			if err != nil || string(got) != "rotated" {
				t.Errorf("after rotation: %q, %v", got, err)
			}
			return nil
		})
	})

	t.Run("ViewsCannotSet", func(t *testing.T) {
		err := s.View(t.Context(), func(tx site.Tx) error { return tx.SetSecret(t.Context(), "x", []byte("y")) })
		if err == nil {
			t.Error("a View set a secret")
		}
	})

	t.Run("EmptyIsInvalid", func(t *testing.T) {
		wantCode(t, try(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetSecret(ctx, "empty", nil) }), site.EInvalid)
	})

	t.Run("ConcurrentEnsuresAgree", func(t *testing.T) {
		const n = 8
		got := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				got[i], errs[i] = site.EnsureSecret(t.Context(), s, "enrolment", func() ([]byte, error) {
					return fmt.Appendf(nil, "made by %d", i), nil
				})
			})
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("ensure %d: %v", i, errs[i])
			}
			if !bytes.Equal(got[i], got[0]) {
				t.Fatalf("brokers got different secrets: %q and %q", got[0], got[i])
			}
		}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			stored, err := tx.Secret(ctx, "enrolment")
			if err != nil || !bytes.Equal(stored, got[0]) {
				t.Errorf("stored %q, %v; handed out %q", stored, err, got[0])
			}
			return nil
		})
	})
}
