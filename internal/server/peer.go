package server

import "github.com/usher-vdi/usher/internal/lhc/peer"

// peerClientConfig is how this broker calls its peers (internal/lhc/peer):
// as itself, with the site's peer key, over plain HTTP with the peer
// package's default client. TLS between brokers plugs in here: an
// *http.Client whose transport trusts the site's CA (and presents this
// broker's certificate, for mTLS) as HTTP, and "https" as Scheme.
func (s *Server) peerClientConfig(key []byte) peer.ClientConfig {
	return peer.ClientConfig{Name: s.name, Key: key, HTTP: nil, Scheme: "http"}
}
