// Package tlstest writes certificates for tests of usher's TLS
// listeners and clients: self-signed pairs valid, expired or not yet
// valid, with keys that match them or not (this file), and a CA with
// server certificates it signs for chosen hosts (ca.go). Tests alone
// import it.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// WritePair writes a self-signed certificate, valid from notBefore to
// notAfter, for localhost and the loopback addresses, with CommonName
// name, and its key, into dir as NAME.crt and NAME.key.
func WritePair(tb testing.TB, dir, name string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return certFile, keyFile
}

// Valid writes a pair valid from an hour ago for a day.
func Valid(tb testing.TB, dir, name string) (certFile, keyFile string) {
	tb.Helper()
	now := time.Now()
	return WritePair(tb, dir, name, now.Add(-time.Hour), now.Add(24*time.Hour))
}

// Replace copies the pair from into the files to, as an operator
// rotating a certificate does: each file replaced whole (written aside,
// then renamed over).
func Replace(tb testing.TB, fromCert, fromKey, toCert, toKey string) {
	tb.Helper()
	for _, p := range [][2]string{{fromKey, toKey}, {fromCert, toCert}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			tb.Fatal(err)
		}
		tmp := p[1] + ".new"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			tb.Fatal(err)
		}
		if err := os.Rename(tmp, p[1]); err != nil {
			tb.Fatal(err)
		}
	}
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
