package auth_test

import (
	"bytes"
	"testing"

	"github.com/usher-vdi/usher/internal/auth"
)

// TestDerive: a derived key is the same for every Signer of the key,
// differs per label, and is never the key itself.
func TestDerive(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	s1, err := auth.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := auth.NewSigner(bytes.Clone(key))
	peer := s1.Derive("peer")
	if !bytes.Equal(peer, s2.Derive("peer")) {
		t.Error("two signers of one key derive different peer keys")
	}
	if bytes.Equal(peer, key) || bytes.Equal(peer, s1.Derive("other")) || len(peer) != 32 {
		t.Errorf("derived key %x: the key itself, another label's, or not 32 bytes", peer)
	}
	peer[0] ^= 1
	if bytes.Equal(peer, s1.Derive("peer")) {
		t.Error("Derive returns the signer's own copy")
	}
}
