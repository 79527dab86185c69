package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// How brokers say they are alive in the site DB's broker registry.
const (
	brokerAliveEvery = 5 * time.Second
	// brokerStale is when a broker not seen alive is taken for gone, and
	// its name may be used again.
	brokerStale = 3 * brokerAliveEvery
)

// brokerZone checks a broker's zone against the site's zones: "" means
// the primary zone.
func brokerZone(ctx context.Context, store site.Store, zone string) (string, error) {
	var zones []site.Zone
	err := store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Zones().List(ctx, site.ListOptions{})
		zones = p.Items
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read zones: %w", err)
	}
	var names []string
	for _, z := range zones {
		if zone == "" && z.Primary || zone != "" && z.Name == zone {
			return z.Name, nil
		}
		names = append(names, z.Name)
	}
	if zone == "" {
		return "", nil // an empty site: no zone yet
	}
	slices.Sort(names)
	return "", fmt.Errorf("zone %q is not a zone of the site (its zones: %s)", zone, strings.Join(names, ", "))
}

// brokerInstance identifies a broker by its host and data directory: a
// broker restarted with the same data directory is the same broker, and
// takes its name back at once.
func brokerInstance(dataDir string) string {
	host, _ := os.Hostname()
	sum := sha256.Sum256([]byte(host + "\x00" + dataDir))
	return hex.EncodeToString(sum[:8])
}

// registerBroker records the broker in the site's registry and keeps its
// record alive until ctx ends, then removes it. It returns once the name
// is claimed.
func (s *Server) registerBroker(ctx context.Context, rec site.BrokerRecord) (stop func(), err error) {
	if err := site.ClaimBrokerName(ctx, s.store, rec, s.cfg.Now(), brokerStale); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(brokerAliveEvery)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				if err := site.BrokerAlive(runCtx, s.store, rec.Name, rec.Instance, s.cfg.Now()); err != nil && runCtx.Err() == nil {
					s.log.Warn("broker registry: could not say this broker is alive", "broker", rec.Name, "err", err)
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer dcancel()
		err := s.store.Update(dctx, func(tx site.Tx) error {
			cur, err := tx.Brokers().Get(dctx, rec.Name)
			if err != nil || cur.Instance != rec.Instance {
				return err
			}
			return tx.Brokers().Delete(dctx, rec.Name)
		})
		if err != nil && site.ErrorCode(err) != site.ENotFound {
			s.log.Debug("broker registry: remove this broker", "broker", rec.Name, "err", err)
		}
	}, nil
}
