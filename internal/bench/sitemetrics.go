package bench

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
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
	c.ok = scrapeMetrics(ctx, client, base, func(name string, v float64) {
		switch {
		case strings.HasPrefix(name, `usher_broker_transactions_total{`) && strings.Contains(name, `operation="register"`):
			c.registrations += v
		case name == "usher_broker_reconnections_total":
			c.reconnects += v
		case strings.HasPrefix(name, `usher_machines{`) && strings.Contains(name, `state="registered"`):
			c.registered += v // summed over zone
		}
	})
	if !c.ok {
		return siteCounters{}
	}
	return c
}

// scrapeMetrics reads the site's /metrics and gives each sample's
// name{labels} and value to visit. It reports whether the whole page was
// read: false when the site does not serve it (visit may have seen part
// of it then).
func scrapeMetrics(ctx context.Context, client *http.Client, base string, visit func(sample string, v float64)) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			visit(line[:i], v)
		}
	}
	return sc.Err() == nil
}

// labelValue returns the value of label key in a Prometheus sample's
// name{labels}, "" when it has none. Values with escaped quotes are not
// told apart (the site's labels have none).
func labelValue(sample, key string) string {
	_, labels, ok := strings.Cut(sample, "{")
	if !ok {
		return ""
	}
	for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
		if k, v, ok := strings.Cut(l, "="); ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
