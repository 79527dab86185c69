package site

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"time"
)

// The machine credential model.
//
// A VDA speaks for a machine with a credential: a signed token that names
// the machine and the ID of the machine's current credential, which the
// site DB keeps. A token whose ID is not the machine's current one is
// refused, so that:
//
//   - enrolling again replaces the credential and cuts off every earlier
//     holder: two VDAs that enrol as one machine take turns, and neither
//     holds it quietly;
//   - an admin revokes one machine's credential (RevokeMachineCredential)
//     without touching any other machine or user;
//   - a credential enrolled with the site's enrolment secret records the
//     secret's fingerprint and dies with the secret: replacing the secret
//     refuses every such credential at once, and their VDAs enrol again
//     with the new one;
//   - a machine given a single-use machine enrolment token
//     (NewMachineEnrolmentToken) is bound: from then on it enrols only with
//     such a token, never with the site's secret. Its credential lives
//     until it expires (its VDA renews it) or an admin revokes it;
//   - a machine deleted and created again starts with no credential.

// Machine enrolment errors.
var (
	// ErrCredentialRevoked refuses a machine token that is not the
	// machine's current credential.
	ErrCredentialRevoked = Errorf(EUnauthorized, "machine credential revoked or replaced; enrol again")
	// ErrBadEnrolmentToken refuses a machine enrolment token that is not
	// the machine's, was used, or expired.
	ErrBadEnrolmentToken = Errorf(EUnauthorized, "wrong, used or expired machine enrolment token")
)

// SecretFingerprint returns the fingerprint of an enrolment secret that
// credentials enrolled with it record.
func SecretFingerprint(secret string) string {
	h := sha256.Sum256([]byte("usher-enrolment-secret\x00" + secret))
	return hex.EncodeToString(h[:16])
}

func hashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

func randomID() string {
	return rand.Text()
}

// Enrolment is how a VDA proved it may speak for a machine: the site's
// enrolment secret (checked by the caller, who passes its fingerprint) or
// a machine enrolment token.
type Enrolment struct {
	Machine string
	// SecretFingerprint is set when the VDA presented the site's secret.
	SecretFingerprint string
	// Token is the machine enrolment token it presented otherwise.
	Token string
}

// EnrolMachine gives the machine a new credential and returns its ID; the
// machine's earlier credential is refused from now on. ENotFound for an
// unknown machine; ErrBadEnrolmentToken for a wrong, used or expired
// token; EForbidden when a bound machine presents the site's secret.
func EnrolMachine(ctx context.Context, tx Tx, e Enrolment, now time.Time) (string, error) {
	c, err := tx.MachineCredential(ctx, e.Machine)
	if err != nil {
		return "", err
	}
	switch {
	case e.Token != "":
		if c.EnrolmentTokenHash == "" || subtle.ConstantTimeCompare([]byte(hashToken(e.Token)), []byte(c.EnrolmentTokenHash)) != 1 ||
			!now.Before(c.EnrolmentTokenExpires) {
			return "", ErrBadEnrolmentToken
		}
		c.SecretFingerprint, c.Bound = "", true
		c.EnrolmentTokenHash, c.EnrolmentTokenExpires = "", time.Time{} // single use
	case c.Bound:
		return "", Errorf(EForbidden, "machine %q is bound to machine enrolment tokens: it does not enrol with the site's secret; "+
			"an admin creates a token with 'usher admin enrol-token %s'", e.Machine, e.Machine)
	case e.SecretFingerprint == "":
		return "", Errorf(EUnauthorized, "no enrolment secret or token")
	default:
		c.SecretFingerprint = e.SecretFingerprint
	}
	c.ID, c.IssuedAt = randomID(), now.UTC()
	if err := tx.SetMachineCredential(ctx, e.Machine, c); err != nil {
		return "", err
	}
	return c.ID, nil
}

// CheckMachineCredential returns nil when id is the machine's current
// credential and, for one enrolled with the site's secret, secret is still
// that secret's fingerprint; ErrCredentialRevoked otherwise, and ENotFound
// for an unknown machine.
func CheckMachineCredential(ctx context.Context, tx Tx, machine, id, secret string) error {
	c, err := tx.MachineCredential(ctx, machine)
	if err != nil {
		return err
	}
	if c.ID == "" || subtle.ConstantTimeCompare([]byte(id), []byte(c.ID)) != 1 ||
		(c.SecretFingerprint != "" && c.SecretFingerprint != secret) {
		return ErrCredentialRevoked
	}
	return nil
}

// RevokeMachineCredential refuses the machine's current credential, and
// any waiting enrolment token; the machine stays bound if it was.
// ENotFound for an unknown machine.
func RevokeMachineCredential(ctx context.Context, tx Tx, machine string) error {
	c, err := tx.MachineCredential(ctx, machine)
	if err != nil {
		return err
	}
	c.ID, c.SecretFingerprint, c.EnrolmentTokenHash, c.EnrolmentTokenExpires = "", "", "", time.Time{}
	return tx.SetMachineCredential(ctx, machine, c)
}

// NewMachineEnrolmentToken binds the machine to machine enrolment tokens
// and returns a new single-use one, valid for ttl, which replaces any
// earlier waiting token. The machine's current credential stays valid
// until it expires or is revoked. ENotFound for an unknown machine.
func NewMachineEnrolmentToken(ctx context.Context, tx Tx, machine string, now time.Time, ttl time.Duration) (string, time.Time, error) {
	c, err := tx.MachineCredential(ctx, machine)
	if err != nil {
		return "", time.Time{}, err
	}
	token := "usher-enrol-" + rand.Text()
	c.Bound = true
	c.EnrolmentTokenHash, c.EnrolmentTokenExpires = hashToken(token), now.Add(ttl).UTC()
	if err := tx.SetMachineCredential(ctx, machine, c); err != nil {
		return "", time.Time{}, err
	}
	return token, c.EnrolmentTokenExpires, nil
}

// DefaultEnrolmentTokenTTL is how long a machine enrolment token waits
// for its VDA.
const DefaultEnrolmentTokenTTL = 24 * time.Hour
