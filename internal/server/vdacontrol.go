package server

import (
	"crypto/x509"

	"github.com/usher-vdi/usher/internal/broker/vdacontrol"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// vdaControl is the broker's client of VDAs' control listeners: https
// control URLs dialled pinned to the certificate each VDA registered, or
// verified against cas (cfg.VDACA; the system roots when nil) when it
// registered none; no control token to an http:// control URL off
// loopback unless cfg.InsecureVDAControl.
func vdaControl(cfg Config, cas *x509.CertPool) *vdacontrol.Client {
	return vdacontrol.NewWith(vdacontrol.Options{AllowPlain: cfg.InsecureVDAControl, CAs: cas})
}

// vdaCAs are the CAs of cfg.VDACA, which the VDA control client and the
// display gateway verify unpinned agents with; nil without one.
func vdaCAs(cfg Config) (*x509.CertPool, error) {
	if cfg.VDACA == "" {
		return nil, nil
	}
	return tlsconf.LoadCAs("server: VDA CA", cfg.VDACA)
}
