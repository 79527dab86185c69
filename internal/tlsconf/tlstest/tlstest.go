// Package tlstest writes certificates for tests of usher's TLS
// listeners and clients: self-signed pairs valid, expired or not yet
// valid, with keys that match them or not (this file), and a CA with
// server certificates it signs for chosen hosts (ca.go). Tests alone
// import it.
package tlstest

import (
	"crypto/x509"
	"os"
	"testing"
	"time"
)

// WritePair writes a self-signed certificate, valid from notBefore to
// notAfter, for localhost and the loopback addresses, with CommonName
// name, and its key, into dir as NAME.crt and NAME.key.
func WritePair(tb testing.TB, dir, name string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	tb.Helper()
	p := issue(tb, dir, name, []string{"localhost", "127.0.0.1", "::1"}, notBefore, notAfter, nil)
	return p.CertFile, p.KeyFile
}

// Valid writes a pair valid from an hour ago for a day.
func Valid(tb testing.TB, dir, name string) (certFile, keyFile string) {
	tb.Helper()
	now := time.Now()
	return WritePair(tb, dir, name, now.Add(-time.Hour), now.Add(24*time.Hour))
}

// Replace copies the pair from into the files to, as an operator
// rotating a certificate does: each file replaced whole (written aside,
// then renamed over), the key first.
func Replace(tb testing.TB, fromCert, fromKey, toCert, toKey string) {
	tb.Helper()
	Pair{CertFile: fromCert, KeyFile: fromKey}.Install(tb, toCert, toKey)
}

// Pool is a pool holding the certificates of certFile.
func Pool(tb testing.TB, certFile string) *x509.CertPool {
	tb.Helper()
	raw, err := os.ReadFile(certFile)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		tb.Fatalf("no certificate in %s", certFile)
	}
	return pool
}
