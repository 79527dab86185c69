package bench

import (
	"context"
	"net/http"

	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/metricname"
)

// siteCounters are what a site's /metrics say about its VDAs and
// launches.
type siteCounters struct {
	// registrations counts VDA registrations, failed ones included: a VDA
	// registers again when the broker stopped hearing from it.
	registrations float64
	// reconnects counts launches that went back to a live session.
	reconnects float64
	// registered is the machines registered at the reading.
	registered float64
	ok         bool
}

// Sub returns the counts between an earlier reading o and c; registered
// is c's.
func (c siteCounters) Sub(o siteCounters) siteCounters {
	if !c.ok || !o.ok {
		return siteCounters{}
	}
	return siteCounters{registrations: c.registrations - o.registrations, reconnects: c.reconnects - o.reconnects,
		registered: c.registered, ok: true}
}

// scrapeSite reads the site's /metrics; a site that does not serve them
// gives counters that are not ok.
func scrapeSite(ctx context.Context, client *http.Client, base string) siteCounters {
	c := siteCounters{}
	err := benchkit.Scrape(ctx, client, base+"/metrics", func(s benchkit.Sample) {
		switch s.Name {
		case metricname.BrokerTransactions:
			if s.Labels[metricname.Operation] == broker.OpRegister {
				c.registrations += s.Value
			}
		case metricname.BrokerReconnections:
			c.reconnects += s.Value
		case metricname.Machines:
			if s.Labels[metricname.State] == "registered" {
				c.registered += s.Value // summed over zone
			}
		}
	})
	if err != nil {
		return siteCounters{}
	}
	c.ok = true
	return c
}
