package server

import "github.com/usher-vdi/usher/internal/lhc/peer"

// peerClientConfig is how this broker calls its peers (internal/lhc/peer):
// as itself, with the site's peer key, over the client and scheme of
// peerClient (https verified against the peers' CA when the listeners
// speak TLS).
func (s *Server) peerClientConfig(key []byte) peer.ClientConfig {
	client, scheme := s.peerClient()
	return peer.ClientConfig{Name: s.name, Key: key, HTTP: client, Scheme: scheme}
}
