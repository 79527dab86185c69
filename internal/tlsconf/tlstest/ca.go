package tlstest

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

	"github.com/usher-vdi/usher/internal/atomicfile"
)

// CA is a certificate authority of a test, whose certificate is in
// CertFile.
type CA struct {
	Cert     *x509.Certificate
	CertFile string
	key      *ecdsa.PrivateKey
	dir      string
}

// NewCA makes a CA valid for a day, with its certificate in a file of a
// temporary directory of tb.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{SerialNumber: serial(tb), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, dir: tb.TempDir()}
	ca.CertFile = filepath.Join(ca.dir, name+"-ca.pem")
	writePEM(tb, ca.CertFile, "CERTIFICATE", der, 0o644)
	return ca
}

// Pair is a server certificate and its key, in files.
type Pair struct {
	CertFile, KeyFile string
	// Leaf is the certificate; TLS the pair for a tls.Config.
	Leaf *x509.Certificate
	TLS  tls.Certificate
}

// Issue makes a server certificate signed by ca, for hosts (names or IP
// addresses), valid from notBefore to notAfter.
func (ca *CA) Issue(tb testing.TB, name string, hosts []string, notBefore, notAfter time.Time) Pair {
	tb.Helper()
	return issue(tb, ca.dir, name, hosts, notBefore, notAfter, ca)
}

// Valid is Issue for a certificate valid from an hour ago for a day.
func (ca *CA) Valid(tb testing.TB, name string, hosts ...string) Pair {
	tb.Helper()
	return ca.Issue(tb, name, hosts, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// SelfSigned makes a server certificate that signs itself, for hosts,
// valid from an hour ago for a day, in files of dir.
func SelfSigned(tb testing.TB, dir, name string, hosts ...string) Pair {
	tb.Helper()
	return issue(tb, dir, name, hosts, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), nil)
}

func issue(tb testing.TB, dir, name string, hosts []string, notBefore, notAfter time.Time, ca *CA) Pair {
	key := newKey(tb)
	tmpl := &x509.Certificate{SerialNumber: serial(tb), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.Cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	p := Pair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	writePEM(tb, p.CertFile, "CERTIFICATE", der, 0o644)
	writePEM(tb, p.KeyFile, "PRIVATE KEY", kder, 0o600)
	if p.TLS, err = tls.LoadX509KeyPair(p.CertFile, p.KeyFile); err != nil {
		tb.Fatal(err)
	}
	p.Leaf, _ = x509.ParseCertificate(der)
	return p
}

// Install copies p's files over certFile and keyFile, key first, as an
// operator rotating a certificate would.
func (p Pair) Install(tb testing.TB, certFile, keyFile string) {
	tb.Helper()
	for _, c := range [][2]string{{p.KeyFile, keyFile}, {p.CertFile, certFile}} {
		b, err := os.ReadFile(c[0])
		if err != nil {
			tb.Fatal(err)
		}
		if err := atomicfile.WriteFile(c[1], b, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func serial(tb testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func writePEM(tb testing.TB, file, typ string, der []byte, mode os.FileMode) {
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		tb.Fatal(err)
	}
}

// TLSConfig is a server configuration serving p.
func (p Pair) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{p.TLS}}
}
