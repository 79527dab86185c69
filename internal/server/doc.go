// Package server assembles an all-in-one usher site from a Config: the
// data directory and its embedded site DB, the broker, the REST, admin
// and VDA APIs, the NFuse XML service, Prometheus metrics, the index page
// and, on request, the demo site and simulated VDAs. It parses no flags:
// `usher serve`, `usher bench` and tests turn their inputs into a Config
// and start a site the same way. It is the one package that imports every
// adapter; nothing imports it but commands and tests.
package server
