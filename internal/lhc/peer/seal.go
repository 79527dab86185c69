package peer

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/usher-vdi/usher/internal/lhc"
)

// sealed is the body of a learn request: the handover, encrypted and
// authenticated under the site's peer key (AES-256-GCM), for the one
// broker it names. A handover carries the machines' control tokens and
// credentials: whoever reads the request without the key (a stranger at
// the leader's address, anyone on the wire before TLS) learns nothing.
type sealed struct {
	Nonce []byte `json:"nonce"`
	Box   []byte `json:"box"`
}

// sealAD is the additional data of a sealed handover: from which broker,
// to which.
func sealAD(from, to string) []byte {
	return []byte(fmt.Sprintf("usher-peer-v1 handover %q %q", from, to))
}

func (k Key) aead() cipher.AEAD {
	b, err := aes.NewCipher(k.seal)
	if err != nil {
		panic(err) // a 32-byte key
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		panic(err)
	}
	return a
}

// sealHandover seals h for the broker to.
func (k Key) sealHandover(from, to string, h lhc.Handover) (sealed, error) {
	plain, err := json.Marshal(h)
	if err != nil {
		return sealed{}, err
	}
	a := k.aead()
	n := make([]byte, a.NonceSize())
	rand.Read(n)
	return sealed{Nonce: n, Box: a.Seal(nil, n, plain, sealAD(from, to))}, nil
}

// openHandover opens a handover sealed by from for to.
func (k Key) openHandover(from, to string, s sealed) (lhc.Handover, error) {
	a := k.aead()
	if len(s.Nonce) != a.NonceSize() {
		return lhc.Handover{}, errors.New("sealed handover: bad nonce")
	}
	plain, err := a.Open(nil, s.Nonce, s.Box, sealAD(from, to))
	if err != nil {
		return lhc.Handover{}, errors.New("sealed handover: not sealed for this broker with the site's peer key")
	}
	var h lhc.Handover
	if err := json.Unmarshal(plain, &h); err != nil {
		return lhc.Handover{}, fmt.Errorf("sealed handover: %w", err)
	}
	return h, nil
}
