// Package brokerprom reports the broker and the NFuse endpoint to
// Prometheus: Metrics implements broker.Observer for the brokering
// transactions, collects the machine and session gauges from the broker at
// scrape time, and counts NFuse XML Service requests through
// nfuse.Config.Observe. Every metric is listed in the README's "Metrics"
// section; names, labels and meanings are part of usher's interface.
//
// It imports the broker and site domain packages and Prometheus. Only the
// code that assembles a site (internal/server) and tests import it; the broker itself
// knows only the broker.Observer interface.
package brokerprom
