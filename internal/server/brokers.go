package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/api"
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

// brokerProbe bounds the question to each peer that the list of the
// site's brokers asks (its Local Host Cache's state).
const brokerProbe = 500 * time.Millisecond

var _ api.Brokers = (*Server)(nil)

// Brokers lists the site's brokers for the admin API: the registry's
// records (the site DB's, or in an outage the local copy's), each peer
// that is up asked its Local Host Cache's state over the peer protocol,
// and the zone leaders as this broker knows them.
func (s *Server) Brokers(ctx context.Context) ([]api.BrokerStatus, error) {
	var records []site.BrokerRecord
	err := s.store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Brokers().List(ctx, site.ListOptions{})
		records = p.Items
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the broker registry: %w", err)
	}
	self := SelfState{Name: s.name, LHC: api.LHCNone}
	if s.lhc != nil {
		self.LHC = api.LHCNormal
		if s.lhc.InOutage() {
			self.LHC, self.Outage = api.LHCOutage, true
		}
		// In an outage the registry is the copy's, frozen when it was
		// made: its records age against that, as the leader's candidates.
		if at := s.lhc.Status().CopyAt; self.Outage && !at.IsZero() {
			self.AsOf = at
		}
	}
	if s.leader != nil {
		self.Leader, _ = s.leader.Leader()
	}
	out := BrokerStates(records, self, s.cfg.Now(), brokerStale)
	if s.peers == nil {
		return out, nil
	}
	var wg sync.WaitGroup
	for i := range out {
		b := &out[i]
		if b.Self || b.State != api.BrokerUp {
			continue
		}
		rec := records[slices.IndexFunc(records, func(r site.BrokerRecord) bool { return r.Name == b.Name })]
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, brokerProbe)
			defer cancel()
			if st, err := s.peers.State(pctx, rec); err == nil {
				b.LHC = api.LHCNormal
				if st.Outage {
					b.LHC = api.LHCOutage
				}
			}
			b.LastContact = s.peers.Contacted(b.Name)
		})
	}
	wg.Wait()
	return out, nil
}

// SelfState is what the broker listing the site's brokers knows of
// itself.
type SelfState struct {
	Name string
	// LHC is its Local Host Cache's state (api.LHCNone, LHCNormal or
	// LHCOutage); Outage is true in outage mode.
	LHC    string
	Outage bool
	// Leader is its zone's leader as its Leader last chose it, in an
	// outage ("" without one).
	Leader string
	// AsOf, when set, is the time the registry's records are judged by
	// instead of now: the local copy's, in an outage.
	AsOf time.Time
}

// BrokerStates turns the registry's records into the list of the site's
// brokers, in zone and name order: up when seen alive within stale of now
// (or self.AsOf), self marked, the LHC state of peers "unknown" (the caller
// asks them). The zone leader of self's zone in an outage is self.Leader;
// in any other zone, or out of an outage, the first broker of the zone by
// name among those up, which is the one that would lead.
func BrokerStates(records []site.BrokerRecord, self SelfState, now time.Time, stale time.Duration) []api.BrokerStatus {
	asOf := now
	if !self.AsOf.IsZero() {
		asOf = self.AsOf
	}
	out := make([]api.BrokerStatus, 0, len(records))
	for _, r := range records {
		b := api.BrokerStatus{Name: r.Name, Zone: r.Zone, Address: r.Address, LastSeen: r.LastSeen, StartedAt: r.StartedAt,
			State: api.BrokerLost, LHC: api.LHCUnknown}
		if r.Name == self.Name {
			b.Self, b.State, b.LHC = true, api.BrokerUp, self.LHC
		} else if asOf.Sub(r.LastSeen) <= stale {
			b.State = api.BrokerUp
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b api.BrokerStatus) int {
		return cmp.Or(strings.Compare(a.Zone, b.Zone), strings.Compare(a.Name, b.Name))
	})
	var selfZone string
	for _, b := range out {
		if b.Self {
			selfZone = b.Zone
		}
	}
	led := map[string]bool{}
	for i := range out {
		b := &out[i]
		switch {
		case self.Outage && self.Leader != "" && b.Zone == selfZone:
			b.ZoneLeader = b.Name == self.Leader
		case !led[b.Zone] && b.State == api.BrokerUp:
			b.ZoneLeader, led[b.Zone] = true, true
		}
	}
	return out
}
