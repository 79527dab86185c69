package server

import (
	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/lhc/peer"
	"github.com/usher-vdi/usher/internal/nfuse"
)

// The transports take the broker through the small interfaces they
// declare; the site's broker serves each.
var (
	_ api.Broker   = (*broker.Broker)(nil)
	_ nfuse.Broker = (*broker.Broker)(nil)
	_ peer.Local   = (*broker.Broker)(nil)
)
