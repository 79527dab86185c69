package blocktest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
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

// Certs are a test CA and a server certificate it signed for localhost
// and 127.0.0.1, written to Dir in the layout GnuTLS tools (qemu's
// tls-creds-x509, libnbd's tls-certificates) expect: ca-cert.pem,
// server-cert.pem, server-key.pem; and a client certificate the CA
// signed, client-cert.pem and client-key.pem.
type Certs struct {
	Dir    string
	Server *tls.Config    // the server's certificate
	Roots  *x509.CertPool // the CA, for clients
	CA     *x509.Certificate
	Client tls.Certificate // the client's certificate
}

// WriteCerts makes a CA and a server certificate in a new directory.
func WriteCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "usher test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) []byte {
		p := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})
		if err := os.WriteFile(filepath.Join(dir, name), p, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("ca-cert.pem", "CERTIFICATE", caDER)
	certPEM := write("server-cert.pem", "CERTIFICATE", der)
	keyPEM := write("server-key.pem", "PRIVATE KEY", keyDER)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ckey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ctmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "usher test client"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	cder, err := x509.CreateCertificate(rand.Reader, ctmpl, ca, &ckey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ckeyDER, err := x509.MarshalPKCS8PrivateKey(ckey)
	if err != nil {
		t.Fatal(err)
	}
	client, err := tls.X509KeyPair(write("client-cert.pem", "CERTIFICATE", cder), write("client-key.pem", "PRIVATE KEY", ckeyDER))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return &Certs{Dir: dir, Server: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, Roots: roots, CA: ca, Client: client}
}
