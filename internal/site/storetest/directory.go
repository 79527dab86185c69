package storetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// TestDirectory is a complete, enabled directory whose bind password is
// "bind-secret", with a freshly made CA certificate.
func TestDirectory(tb testing.TB) site.Directory {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "storetest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	return site.Directory{
		Enabled: true, Servers: []string{"ldaps://dc1.example.com", "ldap://dc2.example.com:3389"},
		CABundle: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		BindDN:   "CN=usher,OU=Service,DC=example,DC=com", BindPassword: "bind-secret",
		UserBaseDNs: []string{"OU=People,DC=example,DC=com", "OU=Staff,DC=example,DC=com"}, GroupBaseDNs: []string{"OU=Groups,DC=example,DC=com"},
		UserAttribute: site.AttrUserPrincipalName, NetBIOSDomain: "EXAMPLE", UPNSuffix: "example.com",
		DialTimeoutSeconds: 2, TimeoutSeconds: 4, PoolSize: 16, GroupCacheTTLSeconds: 600, MaxNestingDepth: 8,
	}
}

func readDirectory(t *testing.T, s site.Store) site.Directory {
	t.Helper()
	var d site.Directory
	view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
		d, err = tx.Directory(ctx)
		return err
	})
	return d
}

func testDirectory(t *testing.T, open func(*testing.T) site.Store) {

	t.Run("NewSiteHasNone", func(t *testing.T) {
		s := openBase(t, open)
		if d := readDirectory(t, s); !d.IsZero() {
			t.Errorf("a new site's directory is %v, want zero", d)
		}
	})

	t.Run("SetThenReadMovesTheVersionOnce", func(t *testing.T) {
		s := openBase(t, open)
		want := TestDirectory(t)
		v := version(t, s)
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetDirectory(ctx, want) })
		wantVersion(t, s, v+1)
		got := readDirectory(t, s)
		if !got.Equal(want) {
			t.Fatalf("directory = %v, want %v", got, want)
		}
		if got.BindPassword != want.BindPassword {
			t.Errorf("bind password not read back")
		}
		// The servers' order is the order they are tried in.
		if !slices.Equal(got.Servers, want.Servers) {
			t.Errorf("servers = %q, want %q in that order", got.Servers, want.Servers)
		}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			changes, complete, err := tx.ConfigChanges(ctx, v)
			if err != nil {
				return err
			}
			if want := []site.ConfigChange{{Version: v + 1, Kind: site.KindDirectory}}; !complete || !slices.Equal(changes, want) {
				t.Errorf("changes since %d = %v (complete %t), want %v", v, changes, complete, want)
			}
			return nil
		})
	})

	t.Run("PasswordIsASiteSecret", func(t *testing.T) {
		s := openBase(t, open)
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetDirectory(ctx, TestDirectory(t)) })
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			v, err := tx.Secret(ctx, site.SecretDirectoryBindPassword)
			if err != nil || string(v) != "bind-secret" {
				t.Errorf("secret %s = %q, %v; want the bind password", site.SecretDirectoryBindPassword, v, err)
			}
			return nil
		})
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.SetSecret(ctx, site.SecretDirectoryBindPassword, []byte("behind its back"))
		})
		wantCode(t, err, site.EInvalid)
		if got := readDirectory(t, s); got.BindPassword != "bind-secret" {
			t.Errorf("bind password changed by SetSecret")
		}
	})

	t.Run("EmptyPasswordRemovesIt", func(t *testing.T) {
		s := openBase(t, open)
		d := TestDirectory(t)
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetDirectory(ctx, d) })
		d.BindPassword = ""
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetDirectory(ctx, d) })
		if got := readDirectory(t, s); got.BindPassword != "" || !got.Equal(d) {
			t.Errorf("directory = %v, want %v without a password", got, d)
		}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := tx.Secret(ctx, site.SecretDirectoryBindPassword)
			wantCode(t, err, site.ENotFound)
			return nil
		})
	})

	t.Run("InvalidIsRefused", func(t *testing.T) {
		s := openBase(t, open)
		d := TestDirectory(t)
		d.NetBIOSDomain = "MUCH-TOO-LONG-A-NAME"
		v := version(t, s)
		err := try(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetDirectory(ctx, d) })
		wantCode(t, err, site.EInvalid)
		if got := site.ErrorField(err, site.KindDirectory, ""); got != "netbios_domain" {
			t.Errorf("field = %q, want netbios_domain", got)
		}
		wantVersion(t, s, v)
	})

	t.Run("ViewsCannotSet", func(t *testing.T) {
		s := openBase(t, open)
		if err := s.View(t.Context(), func(tx site.Tx) error { return tx.SetDirectory(t.Context(), TestDirectory(t)) }); err == nil {
			t.Error("a View set the directory")
		}
	})

	t.Run("ApplyKeepsThePasswordAndRecordsOnlyThatItChanged", func(t *testing.T) {
		s := openBase(t, open)
		d := TestDirectory(t)
		mutate := func(fn func(*site.Config)) *site.Plan {
			t.Helper()
			var p *site.Plan
			update(t, s, func(ctx context.Context, tx site.Tx) error {
				var err error
				if p, err = site.Mutate(ctx, tx, func(c *site.Config) error { fn(c); return nil }); err != nil {
					return err
				}
				return site.RecordPlan(ctx, tx, "admin:root", p)
			})
			return p
		}
		mutate(func(c *site.Config) { c.Directory = d })
		// A whole configuration without the password keeps it.
		var cfg *site.Config
		view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
			cfg, err = site.LoadConfig(ctx, tx)
			return err
		})
		cfg.Directory.BindPassword = ""
		cfg.Directory.UPNSuffix = "corp.example.com"
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := site.ApplyConfig(ctx, tx, cfg, false)
			return err
		})
		if got := readDirectory(t, s); got.BindPassword != "bind-secret" || got.UPNSuffix != "corp.example.com" {
			t.Errorf("after an apply without the password: %v (password kept: %t)", got, got.BindPassword == "bind-secret")
		}
		p := mutate(func(c *site.Config) { c.Directory.BindPassword = "rotated" })
		if p.Directory == nil || len(*p.Directory) != 1 || (*p.Directory)[0].Path != "bind_password" {
			t.Fatalf("plan of a new password: %s", p)
		}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			page, err := tx.History().List(ctx, site.ChangeFilter{Kind: site.KindDirectory}, site.ListOptions{})
			if err != nil {
				return err
			}
			if len(page.Items) != 2 {
				t.Fatalf("directory history = %+v, want 2 records", page.Items)
			}
			if r := page.Items[0]; r.Op != site.OpUpdate || r.Name != "" || !slices.Equal(r.Fields, []string{"bind_password"}) {
				t.Errorf("newest record = %+v, want an update of bind_password", r)
			}
			for _, r := range page.Items {
				for _, f := range r.Fields {
					if f == "rotated" || f == "bind-secret" {
						t.Errorf("a record holds the password: %+v", r)
					}
				}
			}
			return nil
		})
	})

	t.Run("RefreshReadsTheChange", func(t *testing.T) {
		s := openBase(t, open)
		var base *site.Config
		var v int64
		view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
			base, v, err = site.Refresh(ctx, tx, nil, 0)
			return err
		})
		d := TestDirectory(t)
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.SetDirectory(ctx, d) })
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, _, err := site.Refresh(ctx, tx, base, v)
			if err != nil {
				return err
			}
			if !got.Directory.Equal(d) {
				t.Errorf("refreshed directory = %v, want %v", got.Directory, d)
			}
			if !base.Directory.IsZero() {
				t.Errorf("Refresh wrote into its base")
			}
			return nil
		})
	})
}
