// Package tlsconf holds usher's one set of TLS rules for its HTTP
// listeners and the clients that reach them: a server certificate loaded
// from PEM files and loaded again when they change or on SIGHUP, without
// dropping a connection; the rule that a listener off loopback speaks
// TLS unless its operator says otherwise; client configurations that
// verify a CA bundle, the system roots or one pinned certificate; and a
// self-signed certificate for the demo.
//
// Any role's assembly (internal/server, the agent, the stream), the
// clients of usher's own protocols (vda, broker/vdacontrol) and the
// binary may import it; of usher's it imports only atomicfile.
package tlsconf

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/atomicfile"
)

// MinVersion is the oldest TLS version usher speaks, as a server and as a
// client. Cipher suites are Go's defaults.
const MinVersion = tls.VersionTLS12

// HSTS is the Strict-Transport-Security header that usher's TLS
// listeners send with every answer: browsers that saw it come back over
// TLS only, for a year.
const HSTS = "max-age=31536000"

// WithHSTS sets HSTS on every answer of h, a TLS listener's handler.
func WithHSTS(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", HSTS)
		h.ServeHTTP(w, r)
	})
}

// checkEvery bounds how often a Reloader looks at its files' modification
// times; a handshake costs at most two stat calls a second.
const checkEvery = time.Second

// Reloader is a server certificate read from a certificate (chain) file
// and a key file in PEM. GetCertificate hands the current pair to each
// handshake; a change of either file (seen within a second) or Reload
// loads them again. A pair that fails to load, does not match or has
// expired is refused and the last good one kept: the listener never
// goes without a certificate, and connections already up are not
// touched.
type Reloader struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	mu      sync.Mutex
	pair    *tls.Certificate
	stamp   string    // the files' sizes and modification times when pair was read
	checked time.Time // when the files were last looked at
}

// NewReloader loads the pair, refusing one that does not load, whose key
// does not match or that has expired, with an error that names the files.
func NewReloader(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: a certificate needs both a certificate file and a key file")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: log, now: time.Now}
	pair, stamp, err := r.load()
	if err != nil {
		return nil, err
	}
	r.pair, r.stamp, r.checked = pair, stamp, r.now()
	return r, nil
}

// load reads and checks the pair.
func (r *Reloader) load() (*tls.Certificate, string, error) {
	stamp := r.fileStamp()
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return nil, "", fmt.Errorf("tls certificate %s with key %s: %w", r.certFile, r.keyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, "", fmt.Errorf("tls certificate %s: %w", r.certFile, err)
		}
		pair.Leaf = leaf
	}
	if now := r.now(); now.After(leaf.NotAfter) {
		return nil, "", fmt.Errorf("tls certificate %s expired at %s", r.certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	} else if now.Before(leaf.NotBefore) {
		return nil, "", fmt.Errorf("tls certificate %s is not valid before %s", r.certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return &pair, stamp, nil
}

// fileStamp sums up the files' sizes and modification times.
func (r *Reloader) fileStamp() string {
	var b strings.Builder
	for _, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d:%d;", fi.Size(), fi.ModTime().UnixNano())
		} else {
			b.WriteString("-;")
		}
	}
	return b.String()
}

// Reload loads the pair again now, as SIGHUP asks. On error the last
// good pair stays in use and the error says why.
func (r *Reloader) Reload() error {
	pair, stamp, err := r.load()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = r.now()
	if err != nil {
		// Not again until the files change.
		r.stamp = r.fileStamp()
		return err
	}
	changed := !bytes.Equal(pair.Certificate[0], r.pair.Certificate[0])
	r.pair, r.stamp = pair, stamp
	if changed {
		r.log.Info("tls certificate loaded", "cert", r.certFile, "subject", pair.Leaf.Subject.String(),
			"not_after", pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// GetCertificate is tls.Config.GetCertificate: the current pair, loaded
// again first when the files changed.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	due := r.now().Sub(r.checked) >= checkEvery
	if due {
		r.checked = r.now()
	}
	stamp := r.stamp
	r.mu.Unlock()
	if due && r.fileStamp() != stamp {
		if err := r.Reload(); err != nil {
			r.log.Error("tls certificate not reloaded: keeping the one in use", "err", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pair, nil
}

// Leaf is the certificate in use.
func (r *Reloader) Leaf() *x509.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pair.Leaf
}

// Current is the certificate the next handshake gets: Leaf, after loading
// the files again when they changed (looked at at most once a second).
// A holder that publishes the certificate (its pin) asks Current, not
// Leaf, so that it sees a rotation without waiting for a handshake.
func (r *Reloader) Current() *x509.Certificate {
	pair, _ := r.GetCertificate(nil)
	return pair.Leaf
}

// ServerConfig is a listener's TLS configuration serving r's pair, with
// HTTP/2 and HTTP/1.1 offered.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: MinVersion, GetCertificate: r.GetCertificate, NextProtos: []string{"h2", "http/1.1"}}
}

// LoopbackAddr reports whether a listener's address reaches only this
// host: a unix socket ("unix:PATH"), localhost or a loopback IP. A
// wildcard or empty host is not loopback.
func LoopbackAddr(addr string) bool {
	if strings.HasPrefix(addr, "unix:") {
		return true
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ErrPlainListener is what CheckListen returns for a clear listener off
// loopback.
var ErrPlainListener = errors.New("not a loopback address and no TLS")

// CheckListen applies the listener rule: a listener off loopback speaks
// TLS unless insecure says it may not. what names the listener in the
// error ("--listen", "the NFuse listener").
func CheckListen(what, addr string, hasTLS, insecure bool) error {
	if hasTLS || insecure || LoopbackAddr(addr) {
		return nil
	}
	return fmt.Errorf("%s %s: %w: anyone on the network could read and change what it carries "+
		"(passwords, tickets, machine credentials); give it --tls-cert and --tls-key, or pass --insecure-listen", what, addr, ErrPlainListener)
}

// LoadCAs reads a PEM bundle of CA certificates. what names it in errors.
func LoadCAs(what, file string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("%s: no PEM certificate in %s", what, file)
	}
	return pool, nil
}

// ClientConfig is a client's TLS configuration that verifies servers
// against the CA bundle in caFile, or the system roots when caFile is
// empty.
func ClientConfig(what, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: MinVersion}
	if caFile != "" {
		pool, err := LoadCAs(what, caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// TrustPool is the pool a client verifies usher's own servers against:
// the CA bundle in caFile when given, else the system roots, plus every
// certificate of the PEM files in also (a server's own certificate
// chain, so that a site whose servers share a certificate or a CA needs
// no bundle). what names caFile in errors.
func TrustPool(what, caFile string, also ...string) (*x509.CertPool, error) {
	var pool *x509.CertPool
	if caFile != "" {
		p, err := LoadCAs(what, caFile)
		if err != nil {
			return nil, err
		}
		pool = p
	} else if p, err := x509.SystemCertPool(); err == nil {
		pool = p
	} else {
		pool = x509.NewCertPool()
	}
	for _, f := range also {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if !pool.AppendCertsFromPEM(raw) {
			return nil, fmt.Errorf("%s: no PEM certificate in %s", what, f)
		}
	}
	return pool, nil
}

// Fingerprint is a certificate's SHA-256 over its DER bytes, in hex: what
// a pin names.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// ErrPinMismatch is what a pinned client's handshake fails with when the
// server shows another certificate.
var ErrPinMismatch = errors.New("tls: the server's certificate is not the one pinned")

// PinnedConfig is a client's TLS configuration that accepts exactly the
// certificate whose Fingerprint is pin, whatever signed it and whatever
// name it carries (the pin is the identity: a machine's control listener
// pinned at its enrolment, say). Expiry is still checked.
func PinnedConfig(pin string) *tls.Config {
	want, _ := hex.DecodeString(pin)
	return &tls.Config{
		MinVersion:         MinVersion,
		InsecureSkipVerify: true, // replaced by VerifyConnection's pin check
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return ErrPinMismatch
			}
			leaf := cs.PeerCertificates[0]
			sum := sha256.Sum256(leaf.Raw)
			if len(want) != len(sum) || subtle.ConstantTimeCompare(sum[:], want) != 1 {
				return fmt.Errorf("%w (it shows %s)", ErrPinMismatch, Fingerprint(leaf.Raw))
			}
			if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
				return fmt.Errorf("tls: the pinned certificate is not valid now (valid %s to %s)",
					leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
			}
			return nil
		},
	}
}

// Self-signed certificates' files in their directory.
const (
	SelfSignedCert = "tls-cert.pem"
	SelfSignedKey  = "tls-key.pem"
)

// selfSignedLife is how long a generated certificate is valid.
const selfSignedLife = 397 * 24 * time.Hour

// SelfSigned returns the self-signed certificate and key of dir, making
// them (ECDSA P-256, valid 397 days, for hosts, localhost and the
// loopback addresses) when they are missing or expire within a day. The
// key file is 0600 and written atomically.
func SelfSigned(dir string, hosts []string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, SelfSignedCert), filepath.Join(dir, SelfSignedKey)
	if pair, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil {
		if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil && time.Until(leaf.NotAfter) > 24*time.Hour {
			return certFile, keyFile, nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("self-signed certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", "", fmt.Errorf("self-signed certificate: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "usher (self-signed)"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedLife),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range append([]string{"localhost", "127.0.0.1", "::1"}, hosts...) {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", fmt.Errorf("self-signed certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("self-signed certificate: %w", err)
	}
	if err := atomicfile.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	if err := atomicfile.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
