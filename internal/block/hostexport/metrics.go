package hostexport

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/block/hostcache"
)

var (
	descReads = prometheus.NewDesc("usher_hostcache_reads_total",
		"Blocks VMs read, by where they came from: hit (the cache), miss (upstream, fetched by this VM or a concurrent reader), zero (known zero by its digest).",
		[]string{"vm", "image", "result"}, nil)
	descUpReads = prometheus.NewDesc("usher_hostcache_upstream_reads_total",
		"Reads of upstream made for a VM's misses.", []string{"vm", "image"}, nil)
	descUpBytes = prometheus.NewDesc("usher_hostcache_upstream_read_bytes_total",
		"Bytes read from upstream for a VM's misses.", []string{"vm", "image"}, nil)
	descMismatch = prometheus.NewDesc("usher_hostcache_digest_mismatches_total",
		"Blocks upstream served that did not match their digest (fetched again).", []string{"vm", "image"}, nil)
	descBoots = prometheus.NewDesc("usher_hostcache_boots_total",
		"VM connections (boots).", []string{"vm", "image"}, nil)
	descUp = prometheus.NewDesc("usher_hostcache_upstream_up",
		"1 when the connection to the image's current version upstream is live.", []string{"image", "version"}, nil)
	descLost = prometheus.NewDesc("usher_hostcache_upstream_failures_total",
		"Losses of the connection to the image's current version.", []string{"image", "version"}, nil)
	descBack = prometheus.NewDesc("usher_hostcache_upstream_reconnects_total",
		"Reconnections to the image's current version.", []string{"image", "version"}, nil)
	descContent = prometheus.NewDesc("usher_hostcache_keyed_by_content",
		"1 when the image's blocks are keyed by their digests, 0 by position.", []string{"image", "version"}, nil)
	descUsed = prometheus.NewDesc("usher_hostcache_used_bytes",
		"Bytes of blocks the cache holds.", nil, nil)
	descCapacity = prometheus.NewDesc("usher_hostcache_capacity_bytes",
		"Bytes of blocks the cache can hold (--size).", nil, nil)
	descEvictions = prometheus.NewDesc("usher_hostcache_evictions_total",
		"Blocks evicted to make room.", nil, nil)
	descCorrupt = prometheus.NewDesc("usher_hostcache_corrupt_blocks_total",
		"Cached blocks that did not match their commit record (torn or damaged; fetched again).", nil, nil)
	descWriteErrors = prometheus.NewDesc("usher_hostcache_write_errors_total",
		"Blocks that could not be kept (the cache directory full or unwritable); their reads were served from upstream.", nil, nil)
	descRecovered = prometheus.NewDesc("usher_hostcache_recovered_blocks",
		"Blocks the cache held when it was opened.", nil, nil)
)

// Describe implements prometheus.Collector.
func (e *Exports) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReads, descUpReads, descUpBytes, descMismatch, descBoots, descUp, descLost, descBack,
		descContent, descUsed, descCapacity, descEvictions, descCorrupt, descWriteErrors, descRecovered} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (e *Exports) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	type row struct {
		name, image string
		st          hostcache.DeviceStats
		boots       int64
	}
	var rows []row
	type ver struct {
		image, desc          string
		up, content          bool
		failures, reconnects int64
	}
	var vers []ver
	e.mu.Lock()
	for _, name := range slices.Sorted(maps.Keys(e.vms)) {
		m := e.vms[name]
		st := m.past
		if m.cur != nil {
			st = add(st, m.cur.Stats())
		}
		rows = append(rows, row{name, m.image, st, m.boots})
	}
	for _, name := range slices.Sorted(maps.Keys(e.images)) {
		if v := e.images[name].cur; v != nil {
			vers = append(vers, ver{name, v.desc, v.up.Up(), v.table != nil, v.up.Failures(), v.up.Reconnects()})
		}
	}
	e.mu.Unlock()
	for _, r := range rows {
		counter(descReads, r.st.Hits, r.name, r.image, "hit")
		counter(descReads, r.st.Misses, r.name, r.image, "miss")
		counter(descReads, r.st.Zero, r.name, r.image, "zero")
		counter(descUpReads, r.st.Fetches, r.name, r.image)
		counter(descUpBytes, r.st.FetchedBytes, r.name, r.image)
		counter(descMismatch, r.st.Mismatches, r.name, r.image)
		counter(descBoots, r.boots, r.name, r.image)
	}
	b2f := map[bool]float64{true: 1}
	for _, v := range vers {
		gauge(descUp, b2f[v.up], v.image, v.desc)
		counter(descLost, v.failures, v.image, v.desc)
		counter(descBack, v.reconnects, v.image, v.desc)
		gauge(descContent, b2f[v.content], v.image, v.desc)
	}
	st := e.cfg.Cache.Stats()
	bs := float64(e.cfg.Cache.BlockSize())
	gauge(descUsed, float64(st.Used)*bs)
	gauge(descCapacity, float64(st.Slots)*bs)
	counter(descEvictions, st.Evictions)
	counter(descCorrupt, st.Corrupt)
	counter(descWriteErrors, st.WriteErrors)
	gauge(descRecovered, float64(st.Recovered))
}
