package server

import (
	"github.com/usher-vdi/usher/internal/broker/vdacontrol"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// vdaControl is the broker's client of VDAs' control listeners: https
// control URLs dialled pinned to the certificate each VDA registered, or
// verified against cfg.VDACA (the system roots when empty) when it
// registered none; no control token to an http:// control URL off
// loopback unless cfg.InsecureVDAControl.
func vdaControl(cfg Config) (*vdacontrol.Client, error) {
	opts := vdacontrol.Options{AllowPlain: cfg.InsecureVDAControl}
	if cfg.VDACA != "" {
		pool, err := tlsconf.LoadCAs("server: VDA CA", cfg.VDACA)
		if err != nil {
			return nil, err
		}
		opts.CAs = pool
	}
	return vdacontrol.NewWith(opts), nil
}
